"""What a test run leaves behind: nothing. A child test session (tests/vm/lab_probe.py, through the VM tier's own
fixtures) brings its fleet up on a lab root of its own; a SIGTERM to it must remove every container, network, volume,
mount, loop device, cgroup, bridge and process it made. A SIGKILLed one leaves them, also when its engine is killed
with it (as a machine's restart of the sandbox does), and `specfleet-lab down --all` (or the next session) removes
them. On the session's driver (containers: seconds)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import specfleet_lab
from tests.vm.conftest import figure

pytestmark = pytest.mark.vm
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab_driver():
    """The driver a test session gets here (containers, or QEMU where they cannot run): the child's."""
    return specfleet_lab.choose(None, arches=["x86_64"], say=print)


def _bridges() -> set[str]:
    """The lab engines' bridges in the kernel (named sfl<slot>-...)."""
    return {p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("sfl")}


def _machine(lab_root: Path, bridges_before: set[str]) -> dict[str, list[str]]:
    """What of a lab root exists on the machine: its runs' directories and registered fleets, processes that name it,
    mounts under it, loop devices backed by it, its runs' cgroups, bridges that were not there before it."""
    procs = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int(p.name) != os.getpid() and str(lab_root).encode() in (p / "cmdline").read_bytes():
                procs.append(p.name)
        except OSError:
            continue
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(str(lab_root))]
    loops = [line for line in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
             if str(lab_root) in line]
    runs = sorted(p.name for p in (lab_root / "runs").iterdir()) if (lab_root / "runs").is_dir() else []
    cgroups = [str(d) for run in runs for d in Path("/sys/fs/cgroup").glob(f"*/specfleet-lab-{run}")]
    fleets = sorted(p.name for p in (lab_root / "fleets").iterdir()) if (lab_root / "fleets").is_dir() else []
    bridges = sorted(_bridges() - bridges_before)
    return {k: v for k, v in {"processes": procs, "mounts": mounts, "loop devices": loops, "runs": runs,
                              "cgroups": cgroups, "fleets": fleets, "bridges": bridges}.items() if v}


def _start(tmp_path: Path, lab_root: Path, driver: str) -> tuple[subprocess.Popen, Path]:
    ready = tmp_path / "ready.json"
    env = {**os.environ, "SPECFLEET_LAB_ROOT": str(lab_root), "SPECFLEET_LAB_DRIVER": driver,
           "SPECFLEET_PROBE_READY": str(ready), "SPECFLEET_VM_COUNT": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                             f"--basetemp={tmp_path / 'child'}", "tests/vm/lab_probe.py"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not ready.exists():
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the child session's fleet did not come up"
        time.sleep(0.5)
    return proc, ready


@pytest.fixture
def lab_root():
    """A lab root of the child's own, short: the engine's sockets live below it (a UNIX socket path has at most 107
    bytes)."""
    root = Path(tempfile.mkdtemp(prefix="sf-lab-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_sigterm_to_a_test_run_leaves_nothing(tmp_path, lab_root, lab_driver):
    before = _bridges()
    proc, ready = _start(tmp_path, lab_root, lab_driver.name)
    up = _machine(lab_root, before)
    assert up.get("runs") or lab_driver.name == "qemu", up  # it made things: a run, processes, mounts
    assert up.get("processes"), up
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=600)
    figure(f"lab cleanup ({lab_driver.name}): a SIGTERMed session's teardown", f"{time.monotonic() - t0:.1f} s")
    assert proc.returncode != 0, out[-3000:]
    assert _machine(lab_root, before) == {}, (_machine(lab_root, before), out[-3000:])
    assert json.loads(ready.read_text())["hosts"] >= 1


def test_what_a_sigkilled_run_left_goes_with_down_all(tmp_path, lab_root, lab_driver):
    """The test run and every process it started (its engine, lxcfs, the QEMU guests) are SIGKILLed: what they made
    stays (containers' processes, mounts, bridges), and `down --all` removes it."""
    before = _bridges()
    proc, _ = _start(tmp_path, lab_root, lab_driver.name)
    proc.kill()
    proc.communicate(timeout=60)
    left = _machine(lab_root, before)
    assert left.get("processes") and left.get("fleets"), left  # the engine (or the QEMU guests) outlive it
    assert left.get("bridges") or lab_driver.name == "qemu", left
    for pid in left["processes"]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    time.sleep(1)
    assert _machine(lab_root, before).get("bridges") or lab_driver.name == "qemu", "a killed engine keeps them"
    env = {**os.environ, "SPECFLEET_LAB_ROOT": str(lab_root)}
    down = subprocess.run(["specfleet-lab", "down", "--all"], env=env, capture_output=True, text=True, timeout=600)
    assert down.returncode == 0, down.stdout + down.stderr
    assert _machine(lab_root, before) == {}, _machine(lab_root, before)
