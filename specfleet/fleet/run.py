"""Running a packaged deploy on a set of hosts through pyinfra's Python API: what the commands that reach hosts share
(rollout, releases, status, plan, bench, mirror status).

One State per call, the hosts in the order given (pyinfra's own --serial order is random, so batching is done by the
callers), each host carrying its HostPlan in its data as `specfleet` (as specfleet's inventory.py gives it).
Callers look `run_on` up on this module when they call it (`runner.run_on(...)`), so tests can stand it in."""

from __future__ import annotations

from collections.abc import Callable

from pyinfra import host
from pyinfra.api import Config, Inventory, State, deploy
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops

from ..plan import HostPlan
from .status import ReleaseStatus
from .steps.lock import lock, unlock

UNREAD = "UNREACHABLE (status not read)"  # what a read-only command says of a host run_on could not read


def run_on(plans: dict[str, HostPlan], hosts: list[str], fn: Callable, *args) -> set[str]:
    """Run a packaged deploy on `hosts` in parallel; returns the hosts that failed (incl. unreachable)."""
    if not hosts:
        return set()
    inventory = Inventory(([(h, {**plans[h].connection, "specfleet": plans[h]}) for h in hosts], {}))
    state = State(inventory, Config())
    try:
        connect_all(state)
        add_deploy(state, fn, *args)
        run_ops(state)
    except PyinfraError as exc:
        if "No hosts remaining" not in str(exc):
            raise
    finally:
        disconnect_all(state)
    return {h.name for h in state.failed_hosts} | {h for h in hosts if h not in {x.name for x in state.activated_hosts}}


@deploy("Read release status")
def collect_release_status(out: dict):
    out[host.name] = host.get_fact(ReleaseStatus, data_dir=host.data.get("specfleet").settings.data_dir) or {}


def read_statuses(plans: dict[str, HostPlan], hosts: list[str]) -> dict[str, dict]:
    """Current release, lock, gate state and active job of each host (via `specfleet-host status`); {} for a host
    with nothing of specfleet yet. A host missing from the answer was not read (unreachable)."""
    out: dict[str, dict] = {}
    run_on(plans, hosts, collect_release_status, out)
    return out


def lock_hosts(plans: dict[str, HostPlan], hosts: list[str], run_id: str,
               *kind: str) -> tuple[list[str], set[str], dict[str, str]]:
    """Take the run lock on `hosts`: (locked, failed, held). `held`: host -> the owner line of another run's lock;
    when there is one, the locks this call took are released again (the caller refuses the whole run)."""
    held: dict[str, str] = {}
    failed = run_on(plans, hosts, lock, run_id, held, *kind)
    locked = [h for h in hosts if h not in failed]
    if held:
        run_on(plans, locked, unlock, run_id, *kind)
    return locked, failed, held
