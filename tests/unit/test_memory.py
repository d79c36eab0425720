"""The profile must fit the host's unified memory before anything changes (specfleet/memory/rules.py;
the preflight refuses, `plan` shows the figure). Whole converges on pyinfra's @fake connector, the status read
answering with the host's /proc/meminfo."""

from __future__ import annotations

import dataclasses
import re

import pytest

from specfleet.constants import GB
from specfleet.fleet.steps.changes import changes
from specfleet.fleet.steps.state import host_status
from specfleet.memory.rules import fit
from specfleet.pins.models import ModelPin
from specfleet.serving.run.preview import describe
from specfleet.steps import converge
from tests.unit.fakehost import executed, make_plans, run_deploy
from tests.unit.test_deploy_fake import FRESH
from tests.unit.test_pair_trust import SPECFLEET_FACT, _responses
from tests.unit.test_pair_trust import _plans as pair_plans

GPT_OSS = 65 * GB  # roughly gpt-oss-120b's MXFP4 weights (spark-memory.md); the lock has the exact bytes
HEAD = GB // 2  # an EAGLE-3 head


def _big(plan, target=GPT_OSS, draft=HEAD):
    """The plan's pins with the sizes of real models (fake_pins' files are kilobytes)."""
    for role, size in (("target", target), ("draft", draft)):
        if role in plan.pins:
            pin = plan.pins[role]
            plan.pins[role] = ModelPin(role, pin.repo, pin.revision, pin.commit, (("model.safetensors", size),),
                                       pin.ignore_patterns, size, ("e" * 64,))
    plan.pins = dict(plan.pins)  # a new mapping: the memo recomputes
    return plan


def _mem(total_gb: float, available_gb: float | None = None) -> str:
    kb = lambda gb: str(int(gb * GB / 1024))  # noqa: E731
    return f"mem\t{kb(total_gb)}\t{kb(available_gb if available_gb is not None else total_gb * 0.9)}"


def test_what_a_profile_needs_is_its_locked_weights_plus_the_overhead():
    plan = _big(make_plans({"spark-01": {}}, "eagle3")["spark-01"])
    need = plan.memory_fit
    assert need.weights == GPT_OSS + HEAD and need.need == int((GPT_OSS + HEAD) * 1.15)  # memory_overhead_fraction
    assert need.line(int(121.7 * GB)) == "eagle3 needs ~75.3 GB, host has 121.7 GB (reserve 8 GB)"
    assert need.problem(int(121.7 * GB)) is None  # 75.3 <= 121.7 - 8
    assert need.problem(int(83 * GB)) == "memory: eagle3 needs ~75.3 GB, host has 83.0 GB (reserve 8 GB)"
    assert need.problem(0) is None  # not reported: the status read of an older host, nothing to judge
    assert fit(make_plans({"gw": {}}, None)["gw"].settings, {}) is None  # a deploy without a profile
    assert dataclasses.replace(plan, is_mirror=True).memory_fit is None  # a Hub mirror serves no model


def test_a_pair_node_needs_half_the_target_and_the_whole_draft():
    for plan in pair_plans().values():
        need = _big(plan, target=130 * GB, draft=GB).memory_fit
        assert need.pair and need.weights == 65 * GB + GB
        assert need.line(int(121.7 * GB)).startswith("qwen3_eagle3_pair needs ~75.9 GB per node of the pair,")


def _converge(plan, mem: str):
    responses = {re.compile(r"memory: .*>&2; exit 1"): {"success": False, "stderr": "refused"}, **FRESH,
                 "export DATA SVC": [*FRESH["export DATA SVC"], mem]}
    state = run_deploy({plan.settings.host: plan}, converge, plan.settings.profile_name, responses=lambda p: responses)
    return state, executed(state)[plan.settings.host]


@pytest.mark.parametrize("profile", ["eagle3", "vllm_eagle3"])  # an engine of either kind
def test_a_profile_that_does_not_fit_is_refused_before_any_download_or_restart(profile):
    plan = _big(make_plans({"spark-01": {}}, profile)["spark-01"])
    state, cmds = _converge(plan, _mem(80))
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]
    refusal = [c for c in cmds if c.startswith("echo ") and "exit 1" in c]
    told = ", vllm_gpu_memory_utilization 0.8 = 64.0 GB for the server" if profile.startswith("vllm_") else ""
    assert refusal == [f"echo 'spark-01: memory: {profile} needs ~75.3 GB, host has 80.0 GB (reserve 8 GB{told})' "
                       ">&2; exit 1"]
    after = cmds[cmds.index(refusal[0]) + 1:]  # facts are read while operations are prepared; nothing runs after
    assert not after, after  # no download, pull, stage, restart: the refusal is the first command that runs


@pytest.mark.parametrize("mem, vars", [(_mem(121.7), {}), (_mem(80), {"memory_reserve_gb": 4}), ("", {})])
def test_a_profile_that_fits_goes_ahead(mem, vars):
    """Room enough, a smaller reserve, or a host whose status read reports no memory (nothing to judge)."""
    plan = _big(make_plans({"spark-01": vars}, "eagle3")["spark-01"])
    state, cmds = _converge(plan, mem)
    assert not state.failed_hosts
    assert any("fetch-model --repo openai/gpt-oss-120b" in c for c in cmds)


def test_plan_shows_the_figure_whether_or_not_anything_changes():
    plan = _big(make_plans({"spark-01": {}}, "eagle3")["spark-01"])
    found = {}

    def read(_plan):
        found["ch"] = changes(_plan)
        found["mem"] = host_status(_plan).memory.mem_total

    from pyinfra.api import deploy

    responses = {**FRESH, "export DATA SVC": [*FRESH["export DATA SVC"], _mem(121.7, 100)]}
    run_deploy({"spark-01": plan}, deploy("read")(lambda: read(plan)), responses=lambda p: responses)
    assert found["mem"] == int(121.7 * GB) // 1024 * 1024
    lines = describe("spark-01", (found["ch"], False))
    assert ("  memory: eagle3 needs ~75.3 GB, host has 121.7 GB (reserve 8 GB); container capped at 113.7 GB; "
            "100.0 GB available now") in lines, lines


def test_a_pair_whose_worker_lacks_the_memory_is_refused_on_both_hosts():
    """Each node's share is checked on its own host; a pair converges as one, so the head refuses too."""
    plans = {h: _big(p, target=130 * GB, draft=GB) for h, p in pair_plans().items()}
    base = _responses()

    def answer(plan):
        r = base(plan)
        return {**r, SPECFLEET_FACT: [*r[SPECFLEET_FACT], _mem(80 if plan.settings.pair_role == "worker" else 121.7)]}

    state = run_deploy(plans, converge, "qwen3_eagle3_pair", responses=answer)
    refusals = {h: [c for c in cmds if c.startswith("echo ") and "exit 1" in c] for h, cmds in executed(state).items()}
    assert refusals["spark-2"] == ["echo 'spark-2: memory: qwen3_eagle3_pair needs ~75.9 GB per node of the pair, "
                                   "host has 80.0 GB (reserve 8 GB)' >&2; exit 1"]
    assert len(refusals["spark-1"]) == 1 and "worker spark-2 fails its preflight" in refusals["spark-1"][0]
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]
    for h, cmds in executed(state).items():  # nothing ran after either refusal
        assert cmds[-1] == refusals[h][0], cmds[cmds.index(refusals[h][0]):]
