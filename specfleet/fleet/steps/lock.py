"""Run lock: one converge or rollout at a time per host (<data_dir>/lock, created atomically with mkdir).

A converge takes it only when it has something to change (a converged host is only read); a rollout holds
it on every targeted host from start to end. A lock whose owner ran on this controller and whose process
is gone is stale and is taken over (a run killed mid-way must not block the next one); any other holder
makes the host refuse with the holder's line, before anything changes. `specfleet-host unlock ID` (on the
host) releases a lock whose controller is gone for good."""

from __future__ import annotations

import os
import shlex
import socket
import uuid

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from ...host.layout import lock_owner_text
from .state import current_plan, host_status, refuse

CONVERGE_ID = uuid.uuid4().hex[:8]  # this controller process's converge run


def owner_line(run_id: str, kind: str = "rollout") -> str:
    return lock_owner_text(kind, run_id, os.environ.get("USER", "root"), socket.gethostname(), os.getpid())


def is_stale(owner: str) -> bool:
    parts = owner.split()
    try:
        controller = parts[3].split("@", 1)[1]
        pid = int(parts[5])
    except (IndexError, ValueError):
        return False
    if controller != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@deploy("Run lock")
def lock(run_id: str, held: dict | None = None, kind: str = "rollout"):
    plan = current_plan()
    lock_dir = plan.paths.lock
    st = host_status(plan)
    mine = owner_line(run_id, kind)
    if st.release.lock and st.release.lock.split(" since ")[0] != mine:
        if not is_stale(st.release.lock):
            if held is not None:
                held[host.name] = st.release.lock
            refuse(name="Take the run lock",
                   message=f"{host.name}: refused: another run holds the lock: {st.release.lock}")
            return
        server.shell(name="Take over a stale run lock", commands=[f"rm -rf {shlex.quote(lock_dir)}"])
    if not st.release.lock or st.release.lock.split(" since ")[0] != mine:
        line, d = shlex.quote(mine), shlex.quote(lock_dir)
        server.shell(name="Take the run lock", commands=[
            f"mkdir -p {shlex.quote(plan.settings.data_dir)} && if mkdir {d} 2>/dev/null; then "
            f"echo {line} since $(date -u +%Y-%m-%dT%H:%M:%SZ) > {d}/owner; else "
            f"echo \"{host.name}: refused: another run holds the lock: $(cat {d}/owner)\" >&2; exit 1; fi"])


@deploy("Run unlock")
def unlock(run_id: str, kind: str = "rollout"):
    plan = current_plan()
    d = shlex.quote(plan.paths.lock)
    mine = shlex.quote(owner_line(run_id, kind))
    server.shell(name="Release the run lock", commands=[
        f"if grep -qF {mine} {d}/owner 2>/dev/null; then rm -rf {d}; fi"])
