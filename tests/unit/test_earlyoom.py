"""On a real GB10: the GPU's allocations are not charged to the container's cgroup, so its cap
cannot hold them; earlyoom (the distribution's) watches MemAvailable, which counts them, and ends the serving container
first (memory/steps.py). Whole converges and cleanups on pyinfra's @fake connector, the status read answering."""

from __future__ import annotations

import re

import pytest

from specfleet.fleet.settings import build_settings
from specfleet.fleet.status import SpecfleetHost, sha256
from specfleet.fleet.steps.changes import changes
from specfleet.host.layout import EARLYOOM_BIN, Layout
from specfleet.memory.render import earlyoom_dropin, earlyoom_kib
from specfleet.memory.steps import EARLYOOM_ENABLED, EARLYOOM_INSTALLED
from specfleet.serving.run.preview import describe
from specfleet.steps import cleanup
from tests.unit.fakehost import SPECFLEET_FACT, changed_ops, converged_responses, executed, make_plans, run_deploy
from tests.unit.test_deploy_fake import FRESH, _run

LAYOUT = Layout("/var/lib/specfleet")
DROPIN, MARKER = LAYOUT.earlyoom_dropin, LAYOUT.earlyoom_marker
INSTALL = "install -o DPkg::Lock::Timeout=600 earlyoom"


def _with(earlyoom: str, files_missing=(), marker: str | None = None):
    """A converged host whose status read says `earlyoom` (binary, ActiveState, UnitFileState) and `marker`."""
    def responses(p):
        out = converged_responses(p, earlyoom=earlyoom, files_missing=list(files_missing))
        if marker is not None:
            out[SPECFLEET_FACT] = [*out[SPECFLEET_FACT], f"file\tfile|644|root|root|{sha256(marker)}\t{MARKER}"]
        return out
    return responses


def _earlyoom_commands(cmds: list[str]) -> list[str]:
    return [c for c in cmds if "earlyoom" in c and not c.startswith("DATA=")]  # all but the status read


def test_the_drop_in_gives_earlyoom_its_floor_in_kib_and_spares_the_box():
    s = make_plans({"spark-01": {}}, "eagle3")["spark-01"].settings
    assert earlyoom_kib(s) == (2 * 10**9 // 1024,) * 2 == (1953125, 1953125)  # SIGKILL at once
    text = earlyoom_dropin(s)
    assert "\nExecStart=\n" in text  # the package's own command line is reset, not added to
    assert f"\nExecStart={EARLYOOM_BIN} -M 1953125,1953125 -s 100,100 -r 3600 " \
           "--avoid ^(init|systemd|sshd|dockerd|containerd)$$\n" in text  # systemd reads `$$` as `$`
    assert DROPIN == "/etc/systemd/system/earlyoom.service.d/specfleet.conf"


def test_a_host_without_earlyoom_gets_it_installed_configured_and_started_and_plan_says_so():
    plan, state, cmds = _run("eagle3", lambda p: FRESH)
    assert not state.failed_hosts
    ran = "\n".join(_earlyoom_commands(cmds))
    assert INSTALL in ran, ran
    assert ran.index(INSTALL) < ran.index(f"chmod 644 {DROPIN}") < ran.index("systemctl restart earlyoom.service"), ran
    assert "systemctl enable earlyoom.service" in ran and MARKER in ran
    found = {}
    plans = make_plans({"spark-01": {}}, "eagle3")
    from pyinfra.api import deploy

    def read():
        found["changes"] = changes(plans["spark-01"])

    run_deploy(plans, deploy("read")(read), responses=lambda p: FRESH)
    shown = describe("spark-01", (found["changes"], True))
    assert "  install earlyoom from the distribution and start it (ends the serving container below 2 GB available)" \
        in shown, shown
    assert DROPIN in found["changes"].writes, found["changes"].writes


def test_the_marker_records_what_the_deploy_did_and_an_existing_one_stands():
    _, _, cmds = _run("eagle3", lambda p: FRESH)
    assert any(MARKER in c and "installed by specfleet" not in c for c in cmds)  # uploaded, not on a command line
    _, _, cmds = _run("eagle3", _with(f"{EARLYOOM_BIN}\tinactive\tdisabled", files_missing=[DROPIN]))
    ran = "\n".join(_earlyoom_commands(cmds))
    assert MARKER in ran and INSTALL not in ran and "systemctl enable earlyoom.service" in ran, ran
    # a marker from an earlier deploy (it installed earlyoom) is never overwritten by a later one's view
    _, _, cmds = _run("eagle3", _with(f"{EARLYOOM_BIN}\tinactive\tdisabled", files_missing=[DROPIN],
                                      marker=EARLYOOM_INSTALLED))
    assert MARKER not in "\n".join(_earlyoom_commands(cmds))


def test_a_converged_host_runs_nothing_for_earlyoom():
    plan, state, cmds = _run("eagle3", converged_responses)
    assert changed_ops(state)["spark-01"] == [] and _earlyoom_commands(cmds) == []


@pytest.mark.parametrize("earlyoom,files_missing,want", [
    (f"{EARLYOOM_BIN}\tactive\tenabled", [DROPIN], ["restart"]),  # a new floor (or the drop-in removed by hand)
    (f"{EARLYOOM_BIN}\tfailed\tenabled", [], ["restart"]),  # it stopped: started again
    (f"{EARLYOOM_BIN}\tactive\tdisabled", [], ["enable"]),  # disabled by hand: it runs, but would not at boot
])
def test_a_drifted_earlyoom_is_set_right_without_reinstalling(earlyoom, files_missing, want):
    plan, state, cmds = _run("eagle3", _with(earlyoom, files_missing))
    ran = "\n".join(_earlyoom_commands(cmds))
    assert INSTALL not in ran
    for verb in ("enable", "restart"):
        assert (f"systemctl {verb} earlyoom.service" in ran) == (verb in want), (verb, ran)
    assert (DROPIN in ran) == bool(files_missing), ran


def test_floor_zero_leaves_earlyoom_alone_and_undoes_an_earlier_deploy():
    plan, state, cmds = _run("eagle3", converged_responses, earlyoom_available_gb=0)
    assert _earlyoom_commands(cmds) == []  # nothing of it managed, nothing left from before: nothing runs
    stat = {re.compile(rf"stat -c .* {re.escape(p)} 2>"): f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 "
            f"ctime=0 size=1 '{p}'" for p in (DROPIN, MARKER)}
    left = f"file\tfile|644|root|root|{'0' * 64}\t{DROPIN}"

    def responses(p):
        out = {**_with(f"{EARLYOOM_BIN}\tactive\tenabled", marker=EARLYOOM_ENABLED)(p), **stat}
        out[SPECFLEET_FACT] = [*out[SPECFLEET_FACT], left]
        return out

    plan, state, cmds = _run("eagle3", responses, earlyoom_available_gb=0)
    ran = "\n".join(_earlyoom_commands(cmds))
    assert f"rm -f {DROPIN}" in ran and "systemctl disable --now earlyoom.service" in ran and f"rm -f {MARKER}" in ran


@pytest.mark.parametrize("marker,expect,never", [
    (EARLYOOM_INSTALLED, "apt-get purge -y -o DPkg::Lock::Timeout=600 earlyoom", "systemctl disable"),
    (EARLYOOM_ENABLED, "systemctl disable --now earlyoom.service", "apt-get purge"),
    (None, "systemctl try-restart earlyoom.service", "apt-get purge"),  # it ran before: its own command line again
])
def test_cleanup_undoes_what_the_marker_says(marker, expect, never):
    plans = make_plans({"spark-01": {}}, None)
    lines = [f"earlyoom\t{EARLYOOM_BIN}\tactive\tenabled\t", f"file\tfile|644|root|root|{'0' * 64}\t{DROPIN}"]
    if marker:
        lines.append(f"file\tfile|644|root|root|{sha256(marker)}\t{MARKER}")
    stat = {re.compile(rf"stat -c .* {re.escape(p)} 2>"): f"user=root group=root mode=-rw-r--r-- atime=0 mtime=0 "
            f"ctime=0 size=1 '{p}'" for p in (DROPIN, MARKER)}
    state = run_deploy(plans, cleanup, responses=lambda p: {"export DATA SVC": lines, **stat})
    ran = "\n".join(_earlyoom_commands(executed(state)["spark-01"]))
    assert f"rm -f {DROPIN}" in ran and expect in ran and never not in ran, ran
    assert (f"rm -f {MARKER}" in ran) == bool(marker), ran


def test_cleanup_of_a_host_without_earlyoom_runs_nothing_for_it():
    plans = make_plans({"spark-01": {}}, None)
    state = run_deploy(plans, cleanup, responses=lambda p: {"export DATA SVC": []})
    assert _earlyoom_commands(executed(state)["spark-01"]) == []


def test_the_status_read_reports_earlyoom():
    st = SpecfleetHost().process([f"earlyoom\t{EARLYOOM_BIN}\tactive\tenabled\t"])
    assert st.memory.earlyoom == (EARLYOOM_BIN, "active", "enabled")
    assert SpecfleetHost().process(["earlyoom\t\tinactive\t\t"]).memory.earlyoom == ("", "inactive", "")
    assert SpecfleetHost().process([]).memory.earlyoom == ("", "", "")


@pytest.mark.parametrize("given,reserve,floor_kib", [(None, 8, 1953125), (None, 0.5, 122070), (1, 8, 976562)])
def test_the_floor_is_a_quarter_of_the_reserve_unless_given(given, reserve, floor_kib):
    s = make_plans({"spark-01": {"earlyoom_available_gb": given, "memory_reserve_gb": reserve}}, "eagle3")["spark-01"]
    assert earlyoom_kib(s.settings) == (floor_kib, floor_kib)


@pytest.mark.parametrize("value,reserve,ok", [(2, 8, True), (0, 8, True), (0, 0, True), (8, 8, False), (9, 8, False),
                                              (-1, 8, False), (0.25, 0.5, True)])
def test_a_floor_not_below_the_reserve_is_refused_in_one_line(value, reserve, ok):
    settings, problems = build_settings("h", {"earlyoom_available_gb": value, "memory_reserve_gb": reserve}, "eagle3")
    assert (settings is not None) == ok, problems
    if not ok:
        assert [p.key for p in problems] == ["earlyoom_available_gb"], problems
        assert "\n" not in str(problems[0])
    if not ok and value > 0:
        assert str(problems[0]).startswith(f"h: earlyoom_available_gb: {value:g} GB is not below memory_reserve_gb"), \
            problems
