"""dockerd comes last under memory pressure (memory/steps.py): a drop-in for every start of dockerd,
and the running dockerd's figure set at once (no docker restart); nothing on a host that has both; the cleanup
removes the drop-in. Whole converges on pyinfra's @fake connector, the status read answering."""

from __future__ import annotations

import re

from specfleet.fleet.steps.changes import changes, pending
from specfleet.fleet.steps.state import host_status
from specfleet.host.layout import Layout
from specfleet.memory.render import DOCKERD_OOM_SCORE_ADJ, dockerd_oom_dropin
from specfleet.serving.run.preview import describe
from specfleet.steps import cleanup
from tests.unit.fakehost import converged_responses, executed, make_plans, run_deploy
from tests.unit.test_deploy_fake import FRESH, _run

DROPIN = Layout("/var/lib/specfleet").dockerd_oom_dropin
LIVE = f"echo {DOCKERD_OOM_SCORE_ADJ} > /proc/$p/oom_score_adj"


def _fresh(dockerd: str):
    return lambda p: {**FRESH, "export DATA SVC": [*FRESH["export DATA SVC"], f"dockerd_oom\t{dockerd}"]}


def test_a_fresh_host_gets_the_drop_in_and_its_running_dockerd_the_figure():
    plan, state, cmds = _run("eagle3", _fresh("0"))
    assert not state.failed_hosts
    text = "\n".join(cmds)
    assert DROPIN == "/etc/systemd/system/docker.service.d/specfleet-oom.conf"
    assert DROPIN in text and "systemctl daemon-reload" in text and LIVE in text
    assert "restart docker" not in text and "docker.service restart" not in text  # the serving container keeps running
    assert f"OOMScoreAdjust={DOCKERD_OOM_SCORE_ADJ}\n" in dockerd_oom_dropin()


def test_a_converged_host_runs_nothing_for_it():
    plan, state, cmds = _run("eagle3", converged_responses)
    ran = [c for c in cmds if not c.startswith("DATA=")]  # all but the status read (which asks for the drop-in)
    assert cmds and not [c for c in ran if DROPIN in c or "oom_score_adj" in c], ran


def test_a_dockerd_with_another_figure_is_set_again_and_plan_says_so():
    """dockerd restarted by hand with its packaging's -500 (the drop-in removed meanwhile): both come back."""
    plan, state, cmds = _run("eagle3", lambda p: converged_responses(p, dockerd_oom="-500", files_missing=[DROPIN]))
    text = "\n".join(cmds)
    assert LIVE in text and DROPIN in text
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"]}}, "eagle3")
    found = {}
    from pyinfra.api import deploy

    def read():
        found["pending"] = pending(plans["spark-01"])
        found["changes"] = changes(plans["spark-01"])
        found["st"] = host_status(plans["spark-01"]).memory.dockerd_oom

    run_deploy(plans, deploy("read")(read),
               responses=lambda p: converged_responses(p, dockerd_oom="-500", files_missing=[DROPIN]))
    assert found["st"] == -500
    assert f"set the running dockerd's oom_score_adj -500 -> {DOCKERD_OOM_SCORE_ADJ}" in found["pending"]
    assert f"write {DROPIN}" in found["pending"]
    shown = describe("spark-01", (found["changes"], True))  # `specfleet plan`'s lines
    assert f"  set the running dockerd's oom_score_adj -500 -> {DOCKERD_OOM_SCORE_ADJ}" in shown, shown


def test_a_host_that_cannot_lower_a_score_is_told_so_and_its_converge_goes_on():
    """Without CAP_SYS_RESOURCE in the bounding set (a container host), writing -999 fails with EACCES and systemd
    leaves OOMScoreAdjust=-999 at 0: the converge writes the drop-in, sets nothing live, and plan notes why; a host
    with the capability is set as on any other host (the same status read but for that bit)."""
    without = f"{int('000001ffffffffff', 16) & ~(1 << 24):016x}"
    plan, state, cmds = _run("eagle3", lambda p: converged_responses(p, dockerd_oom="0", cap_bnd=without))
    assert not state.failed_hosts and LIVE not in "\n".join(cmds)
    plan, state, cmds = _run("eagle3", lambda p: converged_responses(p, dockerd_oom="0"))
    assert LIVE in "\n".join(cmds)
    plans = make_plans({"spark-01": {}}, "eagle3")
    found = {}
    from pyinfra.api import deploy

    def read():
        found["changes"] = changes(plans["spark-01"])

    run_deploy(plans, deploy("read")(read), responses=lambda p: converged_responses(p, dockerd_oom="0", cap_bnd=without))
    shown = describe("spark-01", (found["changes"], True))
    assert found["changes"].dockerd is None and shown[0].endswith(": nothing to do") and shown[-1:] == [
        f"  note: dockerd's oom_score_adj stays 0 (wanted {DOCKERD_OOM_SCORE_ADJ}): this host cannot lower an OOM "
        "score (no CAP_SYS_RESOURCE in its capability bounding set, as in a container)"], shown


def test_no_dockerd_found_sets_nothing_live():
    plan, state, cmds = _run("eagle3", _fresh(""))
    assert not state.failed_hosts and DROPIN in "\n".join(cmds)  # the converge ran, its drop-in written
    assert LIVE not in "\n".join(cmds)


def test_cleanup_removes_the_drop_in():
    plans = make_plans({"spark-01": {}}, None)
    found = f"file\tfile|644|root|root|{'0' * 64}\t{DROPIN}"
    stat = f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 ctime=0 size=1 '{DROPIN}'"
    state = run_deploy(plans, cleanup, responses=lambda p: {"export DATA SVC": [found],
                                                            re.compile(rf"stat -c .* {re.escape(DROPIN)} 2>"): stat})
    text = "\n".join(executed(state)["spark-01"])
    assert f"rm -f {DROPIN}" in text and "systemctl daemon-reload" in text
    state = run_deploy(plans, cleanup, responses=lambda p: {"export DATA SVC": []})
    ran = [c for c in executed(state)["spark-01"] if not c.startswith("DATA=")]  # all but the status read
    assert not [c for c in ran if DROPIN in c], ran  # nothing to remove: nothing runs
