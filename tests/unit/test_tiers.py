"""tests/tiers.sh (tests/run.sh, with or without --full): the modules that need a kernel of their own (QEMU) in a
second pytest process beside the rest, both given the run's args, both passed a SIGTERM and waited for, exit 0 only
when both passed. Run with a stand-in for pytest (SPECFLEET_PYTEST) that records its argv and, asked to, holds until
it is signalled."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "tiers.sh"

# A stand-in for `python3 -m pytest`: which of the two runs it is (the main run ignores the QEMU modules), its argv, then per FAKE_MODE: exit with FAKE_RC_<run>, or hold until a SIGTERM and take a moment to
# "tear down" before it exits 130 (what pytest does after the conftest's KeyboardInterrupt).
FAKE = r'''
import os, signal, sys, time
out = os.environ["FAKE_DIR"]
run = "main" if any(a.startswith("--ignore=") for a in sys.argv) else "side"
open(os.path.join(out, run + ".argv"), "w").write("\n".join(sys.argv[1:]))
print(f"stand-in pytest: the {run} run", flush=True)
if os.environ.get("FAKE_MODE") == "hold":
    got = []
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    open(os.path.join(out, run + ".started"), "w").write("")
    held = time.monotonic()
    while not got and time.monotonic() - held < 90:  # never left behind by a failing test
        time.sleep(0.05)
    time.sleep(0.5)  # the teardown
    open(os.path.join(out, run + ".torn_down"), "w").write(str(len(got)))
    sys.exit(130)
sys.exit(int(os.environ.get("FAKE_RC_" + run, "0")))
'''


def session_fixtures(module: Path) -> set[str]:
    """The session fleet's fixtures a test or fixture of `module` takes."""
    return {a.arg for node in ast.walk(ast.parse(module.read_text())) if isinstance(node, ast.FunctionDef)
            for a in node.args.args if a.arg in ("vm_fleet", "lab_inventory")}


def qemu_modules() -> list[str]:
    """The modules marked kernel(...) or qemu_guests, as the script finds them."""
    return sorted(f"tests/vm/{p.name}" for p in (ROOT / "tests" / "vm").glob("test_*.py")
                  if "pytest.mark.kernel(" in p.read_text() or "pytest.mark.qemu_guests" in p.read_text())


def start(tmp_path, mode="exit", **rcs):
    fake = tmp_path / "fake_pytest.py"
    fake.write_text(FAKE)
    env = {**os.environ, "SPECFLEET_PYTEST": f"{sys.executable} {fake}", "FAKE_DIR": str(tmp_path),
           "FAKE_MODE": mode, "TMPDIR": str(tmp_path), "SPECFLEET_SIDE_LOG": str(tmp_path / "side.log"),
           **{f"FAKE_RC_{k}": str(v) for k, v in rcs.items()}}
    return subprocess.Popen(["bash", str(SCRIPT), "--full", "-k", "x y"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_both_runs_get_the_args_and_split_the_modules(tmp_path):
    proc = start(tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    main = (tmp_path / "main.argv").read_text().splitlines()
    side = (tmp_path / "side.argv").read_text().splitlines()
    mods = qemu_modules()
    assert mods and all((ROOT / m).is_file() for m in mods), mods
    assert main[main.index("tests"):][:2] == ["tests", "benchmarks"]
    assert sorted(a.removeprefix("--ignore=") for a in main if a.startswith("--ignore=")) == sorted(mods)
    assert [a for a in side if a in mods] == mods and "tests" not in side
    for argv in (main, side):
        assert argv[-3:] == ["--full", "-k", "x y"], argv  # the run's own args, word for word, to both
    assert "stand-in pytest: the side run" in out and "stand-in pytest: the main run" in out  # the side log, printed


@pytest.mark.parametrize("rcs", [{"main": 1}, {"side": 1}, {"main": 5, "side": 2}])
def test_either_run_failing_fails_the_tier(tmp_path, rcs):
    proc = start(tmp_path, **rcs)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert f"exited {rcs.get('main', 0)}, the QEMU modules' run {rcs.get('side', 0)}" in out


@pytest.mark.parametrize(("rcs", "tier"), [({"side": 5}, 0), ({"main": 5}, 0), ({"main": 5, "side": 5}, 5),
                                          ({"main": 5, "side": 1}, 1)])
def test_a_run_that_selected_no_test_does_not_fail_the_tier(tmp_path, rcs, tier):
    """pytest's 5: `-k` matched only the other run's tests. Both 5: the tier ran nothing, and says so."""
    proc = start(tmp_path, **rcs)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == tier, out


def test_a_sigterm_reaches_both_runs_and_waits_for_their_teardown(tmp_path):
    proc = start(tmp_path, mode="hold")
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"{r}.started").exists() for r in ("main", "side")):  # both hold their signal handler
        assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    # the tier ended after both runs had torn down, each signalled once, and it says they did not pass
    assert (tmp_path / "main.torn_down").read_text() == "1" and (tmp_path / "side.torn_down").read_text() == "1", out
    assert proc.returncode != 0 and "exited 130, the QEMU modules' run 130" in out, out


def test_the_qemu_modules_boot_no_session_fleet():
    """A module that needs a kernel of its own and used the session fleet would boot a second session fleet (the
    container driver's) in the QEMU process: none does, and the script finds some."""
    vm = ROOT / "tests" / "vm"
    session = {f"tests/vm/{p.name}" for p in vm.glob("test_*.py") if session_fixtures(p)}
    assert qemu_modules() and not set(qemu_modules()) & session, set(qemu_modules()) & session


def test_a_second_sigterm_does_not_break_off_the_teardown_the_first_started(capsys):
    """tests/conftest.py's handler: the first SIGTERM unwinds the run (KeyboardInterrupt), a second one (the process
    group signalled and this script passing it on) returns, so the fixtures' teardown goes on."""
    from tests import conftest

    class Config:
        def addinivalue_line(self, *args):
            pass

    config, before = Config(), signal.getsignal(signal.SIGTERM)
    try:
        conftest.pytest_configure(config)
    finally:
        signal.signal(signal.SIGTERM, before)  # this run's own handler, as the runtest hook requires
    with pytest.raises(KeyboardInterrupt, match="tearing the VM fleet down"):
        config._specfleet_sigterm(signal.SIGTERM, None)
    try:
        config._specfleet_sigterm(signal.SIGTERM, None)
    except KeyboardInterrupt:  # caught here: raised on, it would stop this whole test run
        pytest.fail("a second SIGTERM raised KeyboardInterrupt again: it would break off the fleet's teardown")
    assert "already stopping" in capsys.readouterr().out
