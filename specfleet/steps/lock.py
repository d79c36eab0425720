"""Rollout lock: one rollout at a time per host (<data_dir>/lock, created atomically with mkdir).

A lock whose owner ran on this controller and whose process is gone is stale and is taken over (a
rollout killed mid-way must not block the next one); any other holder makes the host refuse."""

from __future__ import annotations

import os
import shlex
import socket

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from ._common import current_plan, host_status, refuse


def owner_line(rollout_id: str) -> str:
    return f"rollout {rollout_id} by {os.environ.get('USER', 'root')}@{socket.gethostname()} pid {os.getpid()}"


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


@deploy("Rollout lock")
def lock(rollout_id: str, held: dict | None = None):
    plan = current_plan()
    lock_dir = plan.paths.lock
    st = host_status(plan)
    mine = owner_line(rollout_id)
    if st.lock and st.lock.split(" since ")[0] != mine:
        if not is_stale(st.lock):
            if held is not None:
                held[host.name] = st.lock
            refuse(name="Take the rollout lock",
                   message=f"{host.name}: refused: another rollout holds the lock: {st.lock}")
            return
        server.shell(name="Take over a stale rollout lock", commands=[f"rm -rf {lock_dir}"])
    if not st.lock or st.lock.split(" since ")[0] != mine:
        line = shlex.quote(mine)
        server.shell(name="Take the rollout lock", commands=[
            f"mkdir -p {plan.settings.data_dir} && if mkdir {lock_dir} 2>/dev/null; then "
            f"echo {line} since $(date -u +%Y-%m-%dT%H:%M:%SZ) > {lock_dir}/owner; else "
            f"echo \"{host.name}: refused: another rollout holds the lock: $(cat {lock_dir}/owner)\" >&2; exit 1; fi"])


@deploy("Rollout unlock")
def unlock(rollout_id: str):
    plan = current_plan()
    lock_dir = plan.paths.lock
    mine = shlex.quote(owner_line(rollout_id))
    server.shell(name="Release the rollout lock", commands=[
        f"if grep -qF {mine} {lock_dir}/owner 2>/dev/null; then rm -rf {lock_dir}; fi"])
