"""The gateway group's roles in a profile run: a profile deploy leaves gateway hosts and Sparks that
serve another profile alone, and a fleet without a gateway group is planned as a fleet of Sparks alone."""

import re

import pytest

from specfleet.serving.run.preview import collect, report
from specfleet.steps import converge
from tests.unit.fakehost import changed_ops, converged_responses, executed, make_plans, run_deploy

FLEET = {"gw-1": {"ssh_hostname": "10.0.0.1"},
         "spark-a": {"ssh_hostname": "10.0.0.2", "serves": "eagle3", "operator_users": ["nvidia"]},
         "spark-b": {"ssh_hostname": "10.0.0.3", "serves": "draft_target", "operator_users": ["nvidia"]}}


def test_a_profile_run_skips_the_gateway_and_the_sparks_of_other_profiles():
    plans = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})
    assert plans["gw-1"].skip == "a gateway host: deploys/gateway.py converges it"
    assert plans["spark-b"].skip == "serves draft_target: deploys/draft_target.py converges it"
    assert plans["spark-a"].skip is None and plans["spark-a"].settings.profile_name == "eagle3"
    # the skipped hosts are built without a profile: no model pins (the lock need not know their models)
    assert plans["gw-1"].settings.profile is None and plans["spark-b"].settings.profile is None
    assert not plans["gw-1"].pins and not plans["spark-b"].pins
    state = run_deploy(plans, converge, "eagle3", responses=lambda p: {} if p.skip else converged_responses(p))
    cmds = executed(state)
    assert cmds["gw-1"] == [] and cmds["spark-b"] == [], cmds  # not even a status read
    assert cmds["spark-a"] and not state.failed_hosts
    assert changed_ops(state) == {"gw-1": [], "spark-a": [], "spark-b": []}


def test_serves_without_a_gateway_group_still_picks_the_run():
    plans = make_plans({k: v for k, v in FLEET.items() if k != "gw-1"}, "draft_target")
    assert plans["spark-a"].skip == "serves eagle3: deploys/eagle3.py converges it"
    assert plans["spark-b"].skip is None and plans["spark-b"].settings.profile_name == "draft_target"


def test_a_fleet_without_gateways_or_serves_plans_sparks_alone():
    before = {"spark-01": {}, "spark-02": {"gateway_backend_port": 8000}}  # no gateway group: no rule between vars
    plans = make_plans(before, "eagle3")
    assert all(p.skip is None and p.settings.profile_name == "eagle3" for p in plans.values())


def test_plan_names_the_hosts_this_deploy_skips():
    plans = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})
    out: dict = {}
    run_deploy({"spark-a": plans["spark-a"]}, collect, out, responses=converged_responses)
    found = {k.removeprefix("@fake/"): v for k, v in out.items()}
    skipped = {h: p.skip for h, p in plans.items() if p.skip}
    lines, code = report(list(plans), found, set(), skipped)
    assert code == 0, lines  # skipped hosts are neither changes nor unreachable
    assert "gw-1: skipped (a gateway host: deploys/gateway.py converges it)" in lines
    assert "spark-b: skipped (serves draft_target: deploys/draft_target.py converges it)" in lines
    assert f"spark-a: release {plans['spark-a'].release_id}: nothing to do" in lines


def test_behind_gateways_a_drop_in_marks_every_start_and_the_release_id_stays():
    """Adding a gateway group leaves the Sparks' release as it is (unit, config, id: joining restarts nothing, the
    docs/upgrades.md); the start marker for the readiness agent is a drop-in beside the unit."""
    from specfleet.gateway.render import spark_files

    with_gw = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"]
    without = make_plans({"spark-a": FLEET["spark-a"]}, "eagle3")["spark-a"]
    assert with_gw.settings.gateways == ["10.0.0.1"] and without.settings.gateways == []
    assert with_gw.rendered == without.rendered and with_gw.release_id == without.release_id
    assert "started" not in with_gw.rendered.unit
    dropin = spark_files(with_gw.settings)["/etc/systemd/system/specfleet-trtllm.service.d/specfleet-start-marker.conf"]
    assert dropin.endswith("[Service]\nExecStartPre=/usr/bin/touch /var/lib/specfleet/started\n"), dropin


def test_a_spark_drains_by_the_gateways_settings_not_its_own():
    fleet = {**FLEET, "gw-1": {"ssh_hostname": "10.0.0.1", "gateway_check_inter_ms": 500, "drain_timeout_sec": 30},
             "spark-a": {**FLEET["spark-a"], "drain_timeout_sec": 999}}
    s = make_plans(fleet, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"].settings
    assert (s.gateways, s.gateway_check_inter_ms, s.drain_timeout_sec) == (["10.0.0.1"], 500, 30)


def test_a_spark_behind_gateways_gets_its_socket_agent_and_drain_file_once():
    from specfleet.gateway.render import spark_files

    plan = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"]
    files = spark_files(plan.settings)
    assert len(files) == 6
    svc = plan.settings.unit_base
    state = run_deploy({"spark-a": plan}, converge, "eagle3", responses=lambda p: converged_responses(
        p, files_missing=[*files, p.paths.agent_dir, p.paths.agent_tool]))  # joining: the agent's program is new too
    changed = [n.rsplit(" | ", 1)[-1] for n in changed_ops(state)["spark-a"]]
    assert [n for n in changed if n.startswith("Write ")] == [f"Write {path}" for path in files], changed
    assert f"Readiness agent directory {plan.paths.agent_dir}" in changed
    cmds = "\n".join(executed(state)["spark-a"])
    assert f"systemctl enable --now {svc}-gateway.socket {svc}-agent.socket" in cmds
    # a socket restarts only if its address changed (another gateway set: systemd applies IPAddressAllow= live)
    assert (f'[ "$(systemctl show -p Listen --value {svc}-gateway.socket)" = \'0.0.0.0:8001 (Stream)\' ] || '
            f"systemctl restart {svc}-gateway.socket") in cmds
    assert f"&& systemctl restart {svc}-gateway.socket" not in cmds and f"\nsystemctl restart {svc}-gateway" not in cmds
    assert "systemctl restart specfleet-trtllm.service" not in cmds and " activate " not in cmds  # trtllm untouched
    assert "try-restart" not in cmds  # the new host tools restart no agent: there is none yet (systemctl would fail)
    # converged: nothing to do
    again = run_deploy({"spark-a": plan}, converge, "eagle3", responses=converged_responses)
    assert changed_ops(again)["spark-a"] == []


def test_without_gateways_a_spark_gets_none_of_it():
    from specfleet.gateway.render import spark_files

    plan = make_plans({"spark-a": FLEET["spark-a"]}, "eagle3")["spark-a"]
    assert spark_files(plan.settings) == {}
    state = run_deploy({"spark-a": plan}, converge, "eagle3", responses=converged_responses)
    changes = [c for c in executed(state)["spark-a"] if not c.startswith("DATA=")]  # but the status read
    assert not [c for c in changes if "-gateway.socket" in c or "gateways.json" in c]
    assert changed_ops(state)["spark-a"] == []


def test_a_gateway_knows_every_spark_its_model_and_its_filtering_socket():
    fleet = {**FLEET, "spark-c": {"ssh_hostname": "10.0.0.4", "serves": "eagle3", "gateway_backend_port": 9001}}
    gw = make_plans(fleet, "eagle3", groups={"gateway": ["gw-1"]})["gw-1"].settings
    assert gw.gateway_backends == {"spark-a": ["openai/gpt-oss-120b", "10.0.0.2:8001", 8002, ""],
                                   "spark-b": ["nvidia/Llama-3.3-70B-Instruct-FP4", "10.0.0.3:8001", 8002, ""],
                                   "spark-c": ["openai/gpt-oss-120b", "10.0.0.4:9001", 8002, ""]}


def test_check_of_the_gateway_deploy_reads_the_keys_and_tls_files_and_shows_no_secret(fleet_file, monkeypatch, tmp_path):
    from click.testing import CliRunner

    from specfleet.cli import main

    secret = "sk-specfleet-check-secret-000111"
    monkeypatch.setenv("SPECFLEET_API_KEYS", f"ci {secret}\nbad {secret}-x y\n")
    key = tmp_path / "key.pem"
    key.write_text("not a pem\n")
    fleet_file("all:\n  hosts: {spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3}}\n  children:\n    gateway:\n"
               f"      hosts: {{gw-1: {{ssh_hostname: 10.0.0.1, gateway_tls_cert_file: {tmp_path}/none.pem, "
               f"gateway_tls_key_file: {key}}}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/gateway.py"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == ["gw-1: gateway_api_keys_file: $SPECFLEET_API_KEYS line 2 is not a valid key line "
                     "(allowed: one `NAME KEY` per line; NAME of letters, digits, '_', '.', '-' (at most 64); KEY of 16 "
                     "to 256 printable ASCII characters without spaces)",
                     f"gw-1: gateway_tls_cert_file: cannot read {tmp_path}/none.pem: No such file or directory",
                     f"gw-1: gateway_tls_key_file: {key} holds no PEM block (allowed: a PEM file with -----BEGIN ...)"]
    assert secret not in result.output
    monkeypatch.setenv("SPECFLEET_API_KEYS", f"ci {secret}\n")
    fleet_file("all:\n  hosts: {spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3}}\n  children:\n    gateway:\n"
               "      hosts: {gw-1: {ssh_hostname: 10.0.0.1}}\n")
    assert CliRunner().invoke(main, ["check", "inventory.py", "deploys/gateway.py"]).exit_code == 0
    # a profile deploy of the same fleet needs no keys on the controller
    monkeypatch.delenv("SPECFLEET_API_KEYS")
    assert CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"]).exit_code == 0


def _restart_all(plans, old, serving_gate=True):
    """Responses of hosts serving `old`'s release (gated), which `plans` would restart."""
    def responses(p):
        if p.skip:
            return {}
        was = old[p.settings.host]
        gate = {"release": was.release_id, "result": "passed"} if serving_gate else {}
        return converged_responses(p, current=was.release_id, release_missing=True, gate=gate,
                                   current_release=was.release_record("t"))
    return responses


def test_a_converge_that_would_restart_every_ready_host_of_a_model_is_refused_before_anything_changes():
    both = {**FLEET, "spark-b": {**FLEET["spark-b"], "serves": "eagle3"}}
    changed = {h: {**v, "extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}} if h != "gw-1" else v
               for h, v in both.items()}
    old = make_plans(both, "eagle3", groups={"gateway": ["gw-1"]})
    new = make_plans(changed, "eagle3", groups={"gateway": ["gw-1"]})
    with pytest.raises(SystemExit) as exc:
        run_deploy(new, converge, "eagle3", responses=_restart_all(new, old))
    assert str(exc.value) == (
        "specfleet: @fake/spark-a, @fake/spark-b: serves openai/gpt-oss-120b: this converge would restart every ready "
        "host of the model at once, leaving the gateways none to send its requests to; use `specfleet rollout "
        "inventory.py deploys/eagle3.py`, which switches them in batches (or converge them a few at a time with --limit)")
    # one of the two keeps serving (already converged): the converge goes on
    new_one = make_plans({**both, "spark-a": changed["spark-a"]}, "eagle3", groups={"gateway": ["gw-1"]})
    state = run_deploy(new_one, converge, "eagle3", responses=_restart_all(new_one, old))
    assert not state.failed_hosts
    # hosts not ready (no passed gate) leave nothing to protect: nothing is refused
    state = run_deploy(new, converge, "eagle3", responses=_restart_all(new, old, serving_gate=False))
    assert not state.failed_hosts


def test_without_gateways_the_same_converge_only_warns():
    hosts = {"spark-a": {}, "spark-b": {}}
    old = make_plans(hosts, "eagle3")
    new = make_plans({h: {"extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}} for h in hosts}, "eagle3")
    state = run_deploy(new, converge, "eagle3", responses=_restart_all(new, old))
    assert not state.failed_hosts


def test_a_fleet_that_dropped_its_gateway_group_removes_what_it_left_and_cleanup_does_too():
    from specfleet.gateway.render import spark_paths
    from specfleet.steps import cleanup

    plan = make_plans({"spark-a": FLEET["spark-a"]}, "eagle3")["spark-a"]
    svc = plan.settings.unit_base
    left = spark_paths(plan.settings)
    leftovers = [f"file\tfile|644|root|root|{'0' * 64}\t{path}" for path in left]

    from tests.unit.fakehost import SPECFLEET_FACT, status_lines
    for deploy_fn, args in ((converge, ("eagle3",)), (cleanup, ())):
        state = run_deploy({"spark-a": plan}, deploy_fn, *args, responses=lambda p: {
            **converged_responses(p), SPECFLEET_FACT: status_lines(p) + leftovers})
        cmds = "\n".join(executed(state)["spark-a"])
        assert f"systemctl disable --now {svc}-gateway.socket {svc}-gateway.service {svc}-agent.socket " \
               f"{svc}-agent.service" in cmds, cmds[-2000:]
        assert "rm -f " + " ".join(left) + " /var/lib/specfleet/started" in cmds and "rm -rf /var/lib/specfleet/agent" in cmds
        disable = next(line for line in cmds.splitlines() if "systemctl disable --now" in line)
        assert "start-marker" not in disable, disable  # a drop-in is no unit: systemctl would fail on it
        assert f"rmdir --ignore-fail-on-non-empty /etc/systemd/system/{svc}.service.d" in cmds


def test_cleanup_of_a_gateway_host_stops_haproxy_and_removes_its_files_and_package():
    from specfleet.steps import cleanup
    from tests.unit.fakehost import SPECFLEET_FACT

    plans = make_plans(FLEET, None, groups={"gateway": ["gw-1"]})
    status = ["haproxy\t2.8.5", "features\t+LUA +PROMEX", "active\tactive", "enabled\tenabled", "admin\tyes",
              "file\t644|root|root|x\t/etc/haproxy/haproxy.cfg", "file\t600|root|root|x\t/etc/haproxy/specfleet-keys.map"]
    state = run_deploy({"gw-1": plans["gw-1"]}, cleanup, responses=lambda p: {"gateway.GatewayStatus": status})
    ran = executed(state)["gw-1"]
    cmds = "\n".join(ran)
    assert "systemctl disable --now haproxy" in cmds
    assert "rm -f /etc/haproxy/haproxy.cfg /etc/haproxy/specfleet-keys.map" in cmds
    # a gateway host that never served: its status read finds no Spark service, and nothing Spark-side runs
    assert [c for c in ran if SPECFLEET_FACT.search(c)], ran  # the Spark side's one status read, which finds nothing
    assert not [c for c in ran if "specfleet-trtllm" in c and not SPECFLEET_FACT.search(c)], ran


def test_cleanup_of_a_gateway_host_that_served_as_a_spark_removes_what_it_left():
    """A Spark moved into the gateway group keeps its serving unit, container, dockerd's drop-in and gateway-facing
    units until the cleanup deploy: that removes them after HAProxy's files, found by the one status read."""
    from specfleet.gateway.render import spark_paths
    from specfleet.steps import cleanup
    from tests.unit.fakehost import SPECFLEET_FACT

    plans = make_plans(FLEET, None, groups={"gateway": ["gw-1"]})
    gw = plans["gw-1"]
    svc, dropin = gw.settings.unit_base, gw.paths.dockerd_oom_dropin
    left = [f"file\tfile|644|root|root|{'0' * 64}\t{path}"
            for path in (*spark_paths(make_plans({"spark-a": FLEET["spark-a"]}, "eagle3")["spark-a"].settings),
                         dropin)]
    state = run_deploy({"gw-1": gw}, cleanup, responses=lambda p: {
        "gateway.GatewayStatus": ["active\tinactive", "enabled\tdisabled"],
        SPECFLEET_FACT: ["active\tactive", "enabled\tenabled", "container\ttrue", *left],
        "--property SubState": [f"Id={svc}.service", "SubState=running"],
        "--property UnitFileState": [f"Id={svc}.service", "UnitFileState=enabled"],
        re.compile(rf"stat -c .* {re.escape(dropin)} 2>"):
            f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=1 '{dropin}'"})
    cmds = "\n".join(executed(state)["gw-1"])
    assert not state.failed_hosts
    assert f"systemctl stop {svc}.service" in cmds and f"systemctl disable {svc}.service" in cmds, cmds[-1500:]
    assert f"docker rm -f {svc}" in cmds
    assert f"systemctl disable --now {svc}-gateway.socket" in cmds
    assert f"rm -f {dropin}" in cmds


def test_plan_shows_the_spark_side_writes_and_the_leftovers_it_would_remove():
    behind = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"]
    from specfleet.gateway.render import spark_files, spark_paths

    out: dict = {}
    run_deploy({"spark-a": behind}, collect, out, responses=lambda p: converged_responses(
        p, files_missing=list(spark_files(p.settings))))
    lines, code = report(["spark-a"], {k.removeprefix("@fake/"): v for k, v in out.items()}, set())
    assert code == 10 and "/var/lib/specfleet/gateways.json" in [x for x in lines if "  write 6 managed" in x][0]
    alone = make_plans({"spark-a": FLEET["spark-a"]}, "eagle3")["spark-a"]
    from tests.unit.fakehost import SPECFLEET_FACT, status_lines
    left = [f"file\tfile|644|root|root|{'0' * 64}\t{path}" for path in spark_paths(alone.settings)]
    out = {}
    run_deploy({"spark-a": alone}, collect, out, responses=lambda p: {
        **converged_responses(p), SPECFLEET_FACT: status_lines(p) + left})
    lines, code = report(["spark-a"], {k.removeprefix("@fake/"): v for k, v in out.items()}, set())
    assert code == 10 and any(x.startswith("  remove 6 file(s) left by a gateway group the fleet no longer has: ")
                              and x.endswith("/var/lib/specfleet/gateways.json") for x in lines), lines


def test_a_container_restarted_since_its_gate_is_gated_again_by_the_next_converge():
    """Behind gateways the agent keeps a Spark whose container started again on its own out of the pool; the next
    converge sees the same (the status read reports the start marker) and re-runs the gate, without a restart."""
    plan = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"]
    gate = {"release": plan.release_id, "result": "passed", "started": 100.0}
    held = run_deploy({"spark-a": plan}, converge, "eagle3",
                      responses=lambda p: converged_responses(p, gate=gate, started=100.0))
    assert changed_ops(held)["spark-a"] == []
    again = run_deploy({"spark-a": plan}, converge, "eagle3",
                       responses=lambda p: converged_responses(p, gate=gate, started=250.0))
    cmds = "\n".join(executed(again)["spark-a"])
    assert f"activate {plan.release_id} --revert" in cmds
    assert (f"Converge | Activate | Activate release {plan.release_id} and gate it (the container started again since "
            "its gate passed)") in changed_ops(again)["spark-a"]
    # no marker (a Spark that just joined: the drop-in applies from the next start): its gate stands, nothing restarts
    for before in (None, 100.0):
        joined = run_deploy({"spark-a": plan}, converge, "eagle3",
                            responses=lambda p, before=before: converged_responses(
                                p, gate={**gate, "started": before}, started=None))
        assert changed_ops(joined)["spark-a"] == [], before


def test_a_changed_agent_program_restarts_the_running_agent():
    plan = make_plans(FLEET, "eagle3", groups={"gateway": ["gw-1"]})["spark-a"]
    state = run_deploy({"spark-a": plan}, converge, "eagle3", responses=lambda p: converged_responses(
        p, files_missing=[f"{p.paths.bin}/drain.py"]))
    assert "systemctl try-restart specfleet-trtllm-agent.service" in "\n".join(executed(state)["spark-a"])
    state = run_deploy({"spark-a": plan}, converge, "eagle3", responses=lambda p: converged_responses(
        p, files_missing=[f"{p.paths.bin}/fetch-model"]))  # not something the agent runs
    assert "try-restart" not in "\n".join(executed(state)["spark-a"])


def test_a_limited_converge_is_not_refused_while_sparks_of_the_model_outside_it_may_serve():
    both = {**FLEET, "spark-b": {**FLEET["spark-b"], "serves": "eagle3"}}
    changed = {h: {**v, "extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}} if h != "gw-1" else v
               for h, v in both.items()}
    old = make_plans(both, "eagle3", groups={"gateway": ["gw-1"]})
    new = make_plans(changed, "eagle3", groups={"gateway": ["gw-1"]})
    assert new["spark-a"].settings.model_peers == ["spark-a", "spark-b"]
    state = run_deploy({"spark-a": new["spark-a"]}, converge, "eagle3", responses=_restart_all(new, old))  # --limit
    assert not state.failed_hosts
