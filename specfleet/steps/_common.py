"""Shared by the packaged deploys: the host's plan and status, and an operation that refuses."""

from __future__ import annotations

import shlex
from weakref import WeakKeyDictionary

from pyinfra import host
from pyinfra.api import operation
from pyinfra.context import ctx_state

from ..facts import HostStatus, SpecfleetHost
from ..plan import HostPlan
from ..settings import TIKTOKEN_FILES


def current_plan() -> HostPlan:
    plan = host.data.get("specfleet")
    if not isinstance(plan, HostPlan):
        raise SystemExit(f"specfleet: {host.name}: no specfleet plan in host data; run with specfleet's inventory.py "
                         "(pyinfra inventory.py deploys/<name>.py)")
    return plan


def model_paths(plan: HostPlan) -> dict[str, list[tuple[str, int]]]:
    """Per pin role: the (host path, expected size) of every file the server needs (snapshot + draft dir)."""
    p = plan.paths
    out: dict[str, list[tuple[str, int]]] = {}
    for role, pin in plan.pins.items():
        paths = [(f"{p.snapshot(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        if role == "draft":
            paths += [(f"{p.draft_dir(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        out[role] = paths
    return out


_STATUS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {host name: HostStatus}


def host_status(plan: HostPlan) -> HostStatus:
    """The host's status before this run changed anything (read once per host per run)."""
    per_run = _STATUS.setdefault(ctx_state.get(), {})
    if host.name not in per_run:
        per_run[host.name] = _read_status(plan)
    return per_run[host.name]


def _read_status(plan: HostPlan) -> HostStatus:
    s, p = plan.settings, plan.paths
    sizes = tuple(path for paths in model_paths(plan).values() for path, _ in paths)
    hashes = tuple(f"{p.tiktoken}/{name}" for name in TIKTOKEN_FILES) if s.profile and s.profile["tiktoken"] else ()
    exists = (f"{p.releases}/{plan.release_id}/release.json",) if s.profile else ()
    return host.get_fact(SpecfleetHost, data_dir=s.data_dir, service=s.service_name, port=s.serve_port,
                         image=s.image, sizes=sizes, hashes=hashes, exists=exists)


def missing(plan: HostPlan, status: HostStatus, role: str) -> list[tuple[str, int]]:
    return [(path, size) for path, size in model_paths(plan)[role] if status.sizes.get(path, -1) != size]


@operation(is_idempotent=False)
def refuse(message: str):
    """Fail this host with one line (used by read-only checks; nothing has changed on the host)."""
    yield f"echo {shlex.quote(message)} >&2; exit 1"
