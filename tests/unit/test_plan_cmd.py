"""`specfleet plan`: what a converge would do, per host, from the one status read (pyinfra's @fake connector);
and the one-line warning of a plain converge that restarts several serving hosts at once."""

from __future__ import annotations

import logging

from click.testing import CliRunner

from specfleet.cli import main
from specfleet.serving.run.preview import EXIT_CHANGES, collect, report
from specfleet.steps import converge
from tests.unit.fakehost import converged_responses, executed, make_plans, run_deploy

MUTATING = ("systemctl restart", "daemon-reload", "fetch-model --repo", "docker pull", " activate ", "job start",
            "mkdir /var/lib/specfleet/lock", "usermod")


def _plan(plans, responses):
    out: dict = {}
    state = run_deploy(plans, collect, out, responses=responses)
    for cmds in executed(state).values():
        assert not [c for c in cmds if any(m in c for m in MUTATING)], "plan must only read"
    found = {name.removeprefix("@fake/"): value for name, value in out.items()}
    lines, code = report(list(plans), found, set())
    return "\n".join(lines), code


def test_converged_host_nothing_to_do():
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"]}}, "eagle3")
    text, code = _plan(plans, converged_responses)
    assert code == 0, text
    assert f"spark-01: release {plans['spark-01'].release_id}: nothing to do" in text
    assert "0 of 1 host(s) would change" in text


def test_changed_option_restarts_for_the_config():
    old = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    plans = make_plans({"spark-01": {"extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}}}, "eagle3")
    new = plans["spark-01"]
    text, code = _plan(plans, lambda p: converged_responses(p, current=old.release_id, release_missing=True,
                                                             current_release=old.release_record("t"),
                                                             gate={"release": old.release_id, "result": "passed"}))
    assert code == EXIT_CHANGES, text
    assert f"spark-01: release {old.release_id} -> {new.release_id}" in text
    assert f"restart: yes (release {old.release_id} -> {new.release_id} (config))" in text
    assert "unit rewrite: no" in text and "token: unchanged" in text
    assert "fetch " not in text, "a config change downloads nothing"
    assert "1 serving host(s) would restart" in text


def test_missing_files_are_counted_in_bytes_and_new_model_named():
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    pin = plan.pins["target"]
    snap = plan.paths.snapshot(pin.repo, pin.commit)
    partial = {f"{snap}/model-00002-of-00002.safetensors": -1, f"{snap}/config.json": 7}
    text, code = _plan({"spark-01": plan}, lambda p: converged_responses(p, sizes=partial))
    assert code == EXIT_CHANGES
    assert f"fetch target openai/gpt-oss-120b@{pin.commit[:12]}: 2 file(s), 3,100 bytes" in text
    assert "restart: no" in text


def test_gate_not_passed_activates_without_restart():
    plans = make_plans({"spark-01": {}}, "eagle3")
    rid = plans["spark-01"].release_id
    text, code = _plan(plans, lambda p: converged_responses(p, gate={"release": rid, "result": "failed"}))
    assert code == EXIT_CHANGES
    assert "restart: no" in text and "activate without restart: gate not passed (failed)" in text


def test_model_image_token_unit_and_users():
    old = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"], "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"}},
                       "eagle3")
    record = old.release_record("t")
    record["models"]["draft"]["commit"] = "f" * 40
    text, code = _plan(plans, lambda p: {**converged_responses(p, current=old.release_id, release_missing=True,
                                                                current_release=record, unit_sha256="0" * 64,
                                                                files_missing=[p.paths.token_file]),
                                         })
    assert code == EXIT_CHANGES
    assert f"draft model nvidia/gpt-oss-120b-Eagle3-long-context ffffffffffff -> {'b' * 12}" in text
    assert "image nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6 -> nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12" in text
    assert "unit rewrite: yes" in text and "token: write" in text


def test_a_rendering_upgrade_is_its_own_reason():
    """A 1.3 host converged at rendering 1 (no `rendering` in its release.json) gets the new
    names: the plan says specfleet renders differently, besides the config and unit that follow from it."""
    r13 = {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"}
    plans = make_plans({"spark-01": r13}, "draft_target")
    new = plans["spark-01"]
    record = {k: v for k, v in new.release_record("t").items() if k not in ("rendering", "trtllm_version")}
    record.update(id="r-47b00160dbdf", config_sha256="0" * 64)
    text, code = _plan(plans, lambda p: converged_responses(p, current="r-47b00160dbdf", release_missing=True,
                                                             current_release=record, unit_sha256="0" * 64))
    assert code == EXIT_CHANGES, text
    assert (f"restart: yes (release r-47b00160dbdf -> {new.release_id} (specfleet renders differently: rendering 1 -> 6 "
            "(docs/upgrades.md); config)") in text, text
    same = make_plans({"spark-01": {}}, "draft_target")["spark-01"]
    text, _ = _plan({"spark-01": same}, converged_responses)
    assert "renders differently" not in text  # a converged 1.2.0rc6 host: same release, nothing to say
    # a 1.2.0rc6 host of this rendering whose model moved: the model is the reason, not the rendering
    record = dict(same.release_record("t"), id="r-000000000000")
    record["models"]["draft"]["commit"] = "f" * 40
    text, _ = _plan({"spark-01": same}, lambda p: converged_responses(p, current="r-000000000000", release_missing=True,
                                                                       current_release=record))
    assert "draft model nvidia/Llama-3.1-8B-Instruct-FP4 ffffffffffff" in text and "renders differently" not in text
    # a 1.2.0rc6 host converged at rendering 2 (before the memory cap's unit changes, which concern every version)
    record = dict(same.release_record("t"), id="r-000000000000", rendering=2, config_sha256="0" * 64)
    text, _ = _plan({"spark-01": same}, lambda p: converged_responses(p, current="r-000000000000", release_missing=True,
                                                                       current_release=record))
    assert "specfleet renders differently: rendering 2 -> 6 (docs/upgrades.md)" in text, text
    # ... and at rendering 3 (before the container's memory cap, which concerns every version too)
    record = dict(record, rendering=3)
    text, _ = _plan({"spark-01": same}, lambda p: converged_responses(p, current="r-000000000000", release_missing=True,
                                                                       current_release=record))
    assert "specfleet renders differently: rendering 3 -> 6 (docs/upgrades.md)" in text, text


def test_users_added_and_not_running():
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"]}}, "eagle3")

    def responses(p):
        out = converged_responses(p, active="failed", container="false")
        lines = [line for line in out[next(iter(out))] if not line.startswith("groups\t")] + ["groups\tnvidia\tnvidia"]
        out[next(iter(out))] = lines
        return out

    text, code = _plan(plans, responses)
    assert code == EXIT_CHANGES
    assert "docker group: add nvidia" in text
    assert "restart: yes (not running (failed)) (not serving now)" in text
    assert "0 serving host(s) would restart" in text


def test_unreachable_host_exits_1():
    plans = make_plans({"spark-01": {}, "spark-02": {}}, "eagle3")
    out: dict = {}
    run_deploy({"spark-01": plans["spark-01"]}, collect, out, responses=converged_responses)
    lines, code = report(["spark-01", "spark-02"], {k.removeprefix("@fake/"): v for k, v in out.items()}, {"spark-02"})
    assert code == 1 and "spark-02: UNREACHABLE (status not read)" in lines
    assert lines[-1] == "\n0 of 2 host(s) would change; 1 unreachable (status not read); 0 serving host(s) would restart"


def test_the_plan_command_counts_the_unreachable_hosts(fleet_file, monkeypatch):
    """A host SSH cannot reach (nothing listens on its port) is named, counted in the summary, and exits 1, also
    when another host would change; a gateway or mirror plan counts them the same way."""
    from tests.unit.fakehost import fake_run_on
    from tests.unit.test_gateway_deploy import KEY
    from tests.unit.test_gateway_deploy import _status as gateway_status

    monkeypatch.setenv("SPECFLEET_API_KEYS", f"ci {KEY}\n")
    fleet_file("all:\n  vars: {serves: eagle3}\n  hosts:\n    spark-01: {ssh_hostname: 10.0.0.11}\n"
               "    spark-02: {ssh_hostname: 127.0.0.1, ssh_port: 9}\n    spark-03: {ssh_hostname: 10.0.0.13}\n"
               "  children:\n    gateway:\n      hosts:\n        gw-1: {ssh_hostname: 10.0.0.1}\n"
               "        gw-2: {ssh_hostname: 127.0.0.1, ssh_port: 9}\n")

    def answers(p):
        if p.is_gateway:
            return {"gateway.GatewayStatus": gateway_status(p, files=None)}
        if p.settings.host == "spark-03":
            return converged_responses(p, active="failed", container="false")
        return converged_responses(p)
    fake_run_on(monkeypatch, answers, unreachable=("spark-02", "gw-2"))
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/eagle3.py"])
    assert "spark-02: UNREACHABLE (status not read)" in result.stdout.splitlines(), result.output
    assert ("1 of 3 host(s) would change; 1 unreachable (status not read); 2 skipped (not this deploy's); "
            "0 serving host(s) would restart"
            in result.stdout.splitlines()), result.output
    assert result.exit_code == 1, result.output
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/gateway.py"])
    assert "gw-2: UNREACHABLE (status not read)" in result.stdout.splitlines(), result.output
    assert result.stdout.splitlines()[-1] == "0 of 2 gateway host(s) would change; 1 unreachable (status not read)"
    assert result.exit_code == 1, result.output


def test_plan_command_refuses_bad_input(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n", lock=False)
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2 and "specfleet lock inventory.py" in result.output
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/cleanup.py"])
    assert result.exit_code == 2 and "not a profile deploy" in result.output
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/eagle3.py", "--limit", "nope"])
    assert result.exit_code == 2 and "matches no host" in result.output


def test_converge_restarting_several_serving_hosts_says_so_once(caplog):
    old = make_plans({"a": {}, "b": {}, "c": {}}, "eagle3")
    plans = make_plans({h: {"extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}} for h in "abc"}, "eagle3")
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        run_deploy(plans, converge, "eagle3", responses=lambda p: converged_responses(
            p, current=old["a"].release_id, release_missing=True, current_release=old["a"].release_record("t")))
    lines = [r.getMessage() for r in caplog.records if "serving hosts at once" in r.getMessage()]
    assert lines == ["specfleet: this converge restarts 3 serving hosts at once (@fake/a, @fake/b, @fake/c); "
                     "use specfleet rollout to switch a serving fleet in batches"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyinfra"):
        run_deploy(make_plans({"a": {}, "b": {}}, "eagle3"), converge, "eagle3", responses=converged_responses)
    assert not [r for r in caplog.records if "serving hosts at once" in r.getMessage()]
