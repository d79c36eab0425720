"""Whole converges on pyinfra's @fake connector: what a deploy does to a host in each situation."""

import re

import pytest

from specfleet.steps import cleanup, converge
from tests.unit.conftest import TOKEN
from tests.unit.fakehost import SPECFLEET_FACT, changed_ops, converged_responses, executed, make_plans, run_deploy

MUTATING = ("systemctl restart", "daemon-reload", "fetch-model --repo", "docker pull", " activate ", "job start", "curl ",
            "mkdir /var/lib/specfleet/lock", "docker run --rm --pull=never --network none")


def _run(profile, responses, **vars):
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"], **vars}}, profile)
    state = run_deploy(plans, converge, profile, responses=responses)
    return plans["spark-01"], state, executed(state)["spark-01"]


@pytest.mark.parametrize("profile", ["eagle3", "draft_target", "baseline", "ngram", "vllm_eagle3", "vllm_draft_target",
                                     "vllm_ngram", "vllm_baseline"])
def test_converged_host_changes_nothing(profile):
    plan, state, cmds = _run(profile, converged_responses)
    assert changed_ops(state)["spark-01"] == []
    assert not [c for c in cmds if any(m in c for m in MUTATING)]
    assert not state.failed_hosts


FRESH = {"export DATA SVC": ["docker\tok", 'runtimes\t{"nvidia":{}}', "free\t999999999999", "groups\tnvidia\tnvidia"],
         "uname -s": "Linux"}


def test_fresh_host_gets_everything_in_order():
    plan, state, cmds = _run("eagle3", lambda p: FRESH)
    text = "\n".join(cmds)
    for needle in ("docker pull nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6", "fetch-model --repo openai/gpt-oss-120b",
                   "--ignore 'original/*' --ignore 'metal/*'", "fetch-model --repo nvidia/gpt-oss-120b-Eagle3-long-context",
                   "--link-dir /var/lib/specfleet/drafts/nvidia--gpt-oss-120b-Eagle3-long-context/",
                   "o200k_base.tiktoken", f"activate {plan.release_id} --revert --prune 5", "usermod -a -G docker nvidia"):
        assert needle in text, needle
    assert "/etc/passwd" not in text  # the status read says who is missing from docker: no Users fact
    order = [next(i for i, c in enumerate(cmds) if n in c)
             for n in ("Take the run lock", "mkdir /var/lib/specfleet/lock", "fetch-model --repo openai",
                       f"activate {plan.release_id}", "rm -rf /var/lib/specfleet/lock")
             if n != "Take the run lock"]
    assert order == sorted(order)


def test_a_fresh_host_gets_a_vllm_release_in_the_same_steps_checked_by_the_images_own_vllm():
    plan, state, cmds = _run("vllm_eagle3", lambda p: FRESH)
    text = "\n".join(cmds)
    for needle in ("docker pull nvcr.io/nvidia/vllm:26.05.post1-py3", "fetch-model --repo openai/gpt-oss-120b",
                   "fetch-model --repo nvidia/gpt-oss-120b-Eagle3-v3", "o200k_base.tiktoken",
                   f"activate {plan.release_id} --revert --prune 5"):
        assert needle in text, needle
    # the image's own vLLM parses the unit's arguments before the switch (engines/check.py), TensorRT-LLM's is not run
    check = next(c for c in cmds if "vllm.entrypoints.openai.cli_args:make_arg_parser" in c)
    assert "--network none" in check and " -- openai/gpt-oss-120b --served-model-name openai/gpt-oss-120b " in check
    assert cmds.index(check) < next(i for i, c in enumerate(cmds) if f"activate {plan.release_id}" in c)
    assert "tensorrt_llm" not in text
    assert not state.failed_hosts


def test_token_never_on_a_command_line():
    for responses in (lambda p: FRESH, converged_responses):
        _, _, cmds = _run("eagle3", responses)
        assert cmds and not [c for c in cmds if TOKEN in c]
    _, _, cmds = _run("eagle3", lambda p: FRESH)
    assert any("HF_TOKEN_PATH=/etc/specfleet/hf_token" in c for c in cmds)


def test_changed_option_restarts_without_download():
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"]}}, "eagle3")
    old = plans["spark-01"]
    new_plans = make_plans({"spark-01": {"operator_users": ["nvidia"],
                                         "extra_llm_api_options": {"speculative_config": {"max_draft_len": 3}}}}, "eagle3")
    new = new_plans["spark-01"]
    assert new.release_id != old.release_id
    # the host serves the old release: its status says current = old id
    state = run_deploy(new_plans, converge, "eagle3",
                       responses=lambda p: converged_responses(p, current=old.release_id, release_missing=True))
    cmds = executed(state)["spark-01"]
    assert any(f"activate {new.release_id} --revert" in c for c in cmds)
    assert not [c for c in cmds if "fetch-model --repo" in c or "docker pull" in c]


def test_interrupted_fetch_completes_only_what_is_missing():
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    snap = plan.paths.snapshot(plan.pins["target"].repo, plan.pins["target"].commit)
    partial = {f"{snap}/model-00002-of-00002.safetensors": -1}
    state = run_deploy({"spark-01": plan}, converge, "eagle3",
                       responses=lambda p: converged_responses(p, sizes=partial))
    cmds = executed(state)["spark-01"]
    fetches = [c for c in cmds if "fetch-model --repo" in c]
    assert len(fetches) == 1 and "--repo openai/gpt-oss-120b" in fetches[0]
    assert not [c for c in cmds if " activate " in c], "same release, still serving: no restart"


def test_stopped_service_is_restarted_without_download():
    plan, state, cmds = _run("eagle3", lambda p: converged_responses(p, active="failed", container="false"))
    assert any(" activate " in c for c in cmds) and not any("fetch-model --repo" in c for c in cmds)


@pytest.mark.parametrize("status,message", [
    ({"docker": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"}, "docker daemon not reachable"),
    ({"runtimes": '{"runc":{}}'}, "no nvidia runtime"),
    ({"free": "1000", "sizes": None}, "not enough disk"),
    ({"active": "inactive", "container": "false"}, "port 8000 is in use by another program"),
])
def test_preflight_refuses_before_any_change(status, message):
    def responses(p):
        over = dict(status)
        if "sizes" in over:
            snap = p.paths.snapshot(p.pins["target"].repo, p.pins["target"].commit)
            over["sizes"] = {f"{snap}/model-00001-of-00002.safetensors": -1}
        r = converged_responses(p, **over)
        return {"exit 1": {"success": False, "stderr": "preflight failed"}, **r}
    plans = make_plans({"spark-01": {}, "spark-02": {}}, "eagle3")
    state = run_deploy(plans, converge, "eagle3",
                       responses=lambda p: responses(p) if p.settings.host == "spark-01" else converged_responses(p))
    cmds = executed(state)["spark-01"]
    refusal = [c for c in cmds if "exit 1" in c]
    assert len(refusal) == 1 and "spark-01: preflight: " in refusal[0] and message in refusal[0]
    after = cmds[cmds.index(refusal[0]) + 1:]
    assert not [c for c in after if any(w in c for w in ("mkdir", "chmod", "usermod", "fetch", "activate", "docker pull", "job start"))]
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]


def test_preflight_names_missing_operator_user():
    plans = make_plans({"spark-01": {"operator_users": ["ghost"]}}, "eagle3")
    state = run_deploy(plans, converge, "eagle3", responses=lambda p: {
        "exit 1": {"success": False}, **converged_responses(p, missing_users=["ghost"])})
    refusal = [c for c in executed(state)["spark-01"] if "exit 1" in c]
    assert refusal and "operator user ghost does not exist" in refusal[0]


def test_cleanup_stops_and_keeps_models():
    plans = make_plans({"spark-01": {}}, None)
    state = run_deploy(plans, cleanup, responses=lambda p: {
        "export DATA SVC": ["active\tactive", "enabled\tenabled", "container\ttrue"],
        "--property SubState": ["Id=specfleet-trtllm.service", "SubState=running"],
        "--property UnitFileState": ["Id=specfleet-trtllm.service", "UnitFileState=enabled"]})
    cmds = "\n".join(executed(state)["spark-01"])
    assert "systemctl stop specfleet-trtllm.service" in cmds and "systemctl disable specfleet-trtllm.service" in cmds
    assert "docker rm -f specfleet-trtllm" in cmds
    assert "rm -rf" not in cmds


def test_cleanup_purge_removes_models():
    plans = make_plans({"spark-01": {"purge_models": True}}, None)
    state = run_deploy(plans, cleanup, responses=lambda p: {re.compile(r"stat -c .* /var/lib/specfleet/hf 2>"): "user=root group=root mode=drwxr-xr-x atime=0 mtime=0 ctime=0 size=1 '/var/lib/specfleet/hf'"})
    assert "rm -rf /var/lib/specfleet/hf" in "\n".join(executed(state)["spark-01"])


def test_cleanup_purge_removes_the_memory_record():
    """drop-caches' record of the last start is release state, purged with gate.json."""
    plans = make_plans({"spark-01": {"purge_models": True}}, None)
    found = "user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=1 '/var/lib/specfleet/mem-at-start.json'"
    state = run_deploy(plans, cleanup, responses=lambda p: {
        re.compile(r"stat -c .* /var/lib/specfleet/mem-at-start.json 2>"): found})
    assert "rm -f /var/lib/specfleet/mem-at-start.json" in "\n".join(executed(state)["spark-01"])



# ---------------------------------------------------------------- in-image validation (validate_in_image)
VALIDATE = "docker run --rm --pull=never --network none"


def test_config_validated_in_the_image_when_no_verdict_is_cached():
    plan, state, cmds = _run("eagle3", lambda p: converged_responses(p, validated=[]))
    runs = [c for c in cmds if VALIDATE in c]
    assert len(runs) == 1
    rdir = f"/var/lib/specfleet/releases/{plan.release_id}"
    assert (f"-v {rdir}/extra-llm-api-config.yml:/tmp/specfleet-config.yml:ro" in runs[0]
            and "--entrypoint python3" in runs[0] and "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6 -c" in runs[0])
    assert "TorchLlmArgs" in runs[0] and "/var/lib/specfleet/validated/" in runs[0]
    assert not state.failed_hosts and not [c for c in cmds if " activate " in c], "verdict only: no restart"


def test_a_verdict_for_another_image_or_config_does_not_count():
    _, _, cmds = _run("eagle3", lambda p: converged_responses(p, validated=["0123456789abcdef-cccccccccccc"]))
    assert [c for c in cmds if VALIDATE in c]


def test_cached_verdict_runs_no_container_and_the_status_read_asks_for_it():
    plan, state, cmds = _run("eagle3", converged_responses)
    assert not [c for c in cmds if VALIDATE in c] and changed_ops(state)["spark-01"] == []
    from specfleet.serving.render import config_yaml
    from specfleet.serving.validate import config_key
    status = [c for c in cmds if SPECFLEET_FACT.search(c)]
    assert len(status) == 1 and f"CFG={config_key(config_yaml(plan.settings))}" in status[0]


def test_refused_config_fails_the_host_before_the_switch():
    refusal = ("spark-01: extra_llm_api_options: refused by nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6's own "
               "TensorRT-LLM: ValidationError: 1 validation error for TorchLlmArgs kv_cache_config.x Extra inputs")
    plans = make_plans({"spark-01": {}, "spark-02": {}}, "eagle3")
    old = make_plans({"spark-01": {}}, "baseline")["spark-01"]

    def responses(p):
        # both hosts serve another release; spark-01's image refuses the new config
        r = converged_responses(p, current=old.release_id, release_missing=True, validated=[])
        if p.settings.host == "spark-01":
            return {VALIDATE: {"success": False, "stderr": [refusal]}, **r}
        return r
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    cmds = executed(state)["spark-01"]
    at = next(i for i, c in enumerate(cmds) if VALIDATE in c)
    assert "refused by nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6" in cmds[at] and "own TensorRT-LLM: " in cmds[at]
    assert not [c for c in cmds[at + 1:] if any(w in c for w in (" activate ", "job start", "systemctl"))]
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]
    assert any(f"activate {plans['spark-02'].release_id}" in c for c in executed(state)["spark-02"])
