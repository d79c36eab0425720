"""The cgroups a run leaves on a cgroup v1 machine: the engine's containers live under a parent of their own in each
hierarchy (dockerd --cgroup-parent), removed with the run. A host's inner dockerd (systemd cgroup driver) puts its
containers' blkio cgroups at the machine's blkio root (system.slice/docker-<id>.scope: runc derives that path from
the host's systemd, which does not manage blkio), where they stay when the host goes: empty ones are removed too (a
cgroup with a task cannot be, so another run's running container keeps its own)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
INNER_SCOPE = re.compile(r"^docker-[0-9a-f]{64}\.scope$")


def parent(run_id: str) -> str:
    return f"/specfleet-lab-{run_id}"


def _rmdir_tree(top: Path) -> list[str]:
    """Remove a cgroup directory and those below it, deepest first; the ones that would not go."""
    left = []
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -w[0].count("/")):
        try:
            os.rmdir(dirpath)
        except FileNotFoundError:
            pass
        except OSError as e:
            left.append(f"{dirpath}: {e.strerror}")
    return left


def _pids(run_id: str) -> set[int]:
    pids: set[int] = set()
    for hierarchy in ROOT.iterdir() if ROOT.is_dir() else ():
        for dirpath, _, _ in os.walk(hierarchy / parent(run_id).lstrip("/")):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(p) for p in Path(dirpath, "cgroup.procs").read_text().split()}
    return pids


def kill(run_id: str, wait: float = 10.0) -> None:
    """SIGKILL what still runs in the run's cgroups (its hosts, when their engine died before removing them)."""
    deadline = time.monotonic() + wait
    while (pids := _pids(run_id)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def remove(run_id: str) -> list[str]:
    """Remove the run's cgroups in every hierarchy (killing what runs in them), and the empty inner-container blkio
    leftovers; what stayed."""
    left: list[str] = []
    if not ROOT.is_dir():
        return left
    kill(run_id)
    for hierarchy in ROOT.iterdir():
        top = hierarchy / parent(run_id).lstrip("/")
        if top.is_dir():
            left += _rmdir_tree(top)
    stray = ROOT / "blkio" / "system.slice"
    if stray.is_dir():
        for d in stray.iterdir():
            if INNER_SCOPE.match(d.name):
                with contextlib.suppress(OSError):
                    d.rmdir()
    return left


def leftovers(run_id: str) -> list[str]:
    """The run's cgroup directories that exist (none once `remove` ran)."""
    if not ROOT.is_dir():
        return []
    return [str(h / parent(run_id).lstrip("/")) for h in ROOT.iterdir() if (h / parent(run_id).lstrip("/")).is_dir()]
