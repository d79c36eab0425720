"""Fleet rollouts (stage everywhere, then switch batch by batch behind a readiness gate) and release listing.

Built on pyinfra's Python API: one State per phase/batch, hosts in inventory order (pyinfra's own
--serial order is random, so batching is done here)."""

from __future__ import annotations

import fnmatch
import logging
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import click
from pyinfra import host
from pyinfra.api import Config, Inventory, State, deploy
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops

from .facts import ReleaseStatus
from .plan import EXIT_INVALID, HostPlan, PlanError, deploy_profile, fleet_plans, fleet_plans_or_exit
from .steps import lock, stage, switch, unlock
from .steps._common import current_plan
from .steps.mirror import warm_phase

EXIT_OK, EXIT_HALTED, EXIT_PARTIAL, EXIT_REFUSED = 0, 1, 3, 4


# ---- batch and max-fail arithmetic (pure; unit-tested) -----------------------------------------
def parse_batches(spec: str, n_hosts: int) -> list[int]:
    """Sizes of successive batches for an Ansible-style ramp ("1,25%,100%"); the last entry repeats."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        raise ValueError("--batches needs at least one entry, e.g. 1,25%")
    sizes: list[int] = []
    for entry in entries:
        try:
            if entry.endswith("%"):
                pct = float(entry[:-1])
                if not 0 < pct <= 100:
                    raise ValueError
                sizes.append(max(1, int(n_hosts * pct / 100)))
            else:
                size = int(entry)
                if size <= 0:
                    raise ValueError
                sizes.append(size)
        except ValueError:
            raise ValueError(f"--batches: '{entry}' is not a host count > 0 or a percentage in (0, 100]") from None
    out, done, i = [], 0, 0
    while done < n_hosts:
        size = min(sizes[min(i, len(sizes) - 1)], n_hosts - done)
        out.append(size)
        done += size
        i += 1
    return out


def parse_max_fail(spec: str, n_hosts: int) -> int:
    """Failures tolerated: the rollout halts once failures EXCEED this number."""
    try:
        if spec.endswith("%"):
            pct = float(spec[:-1])
            if not 0 <= pct <= 100:
                raise ValueError
            return int(n_hosts * pct / 100)
        value = int(spec)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        raise ValueError(f"--max-fail: '{spec}' is not a host count >= 0 or a percentage in [0, 100]") from None


def select(hosts: list[str], groups: dict[str, list[str]], limit: str | None) -> list[str]:
    """--limit as in pyinfra: comma-separated host or group names (glob patterns allowed); inventory order."""
    if not limit:
        return list(hosts)
    chosen: set[str] = set()
    for pattern in (p.strip() for p in limit.split(",") if p.strip()):
        for group, members in groups.items():
            if fnmatch.fnmatch(group, pattern):
                chosen.update(members)
        chosen.update(h for h in hosts if fnmatch.fnmatch(h, pattern))
    return [h for h in hosts if h in chosen]


# ---- running pyinfra deploys on a subset of hosts ------------------------------------------------
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


def read_statuses(plans: dict[str, HostPlan], hosts: list[str]) -> dict[str, dict]:
    """Current release, lock, gate state and active job of each host (via `specfleet-host status`)."""
    out: dict[str, dict] = {}

    @deploy("Read release status")
    def collect():
        out[host.name] = host.get_fact(ReleaseStatus, data_dir=current_plan().settings.data_dir) or {}

    run_on(plans, hosts, collect)
    return out


@dataclass
class Outcome:
    host: str
    old: str = "-"
    new: str = "-"
    result: str = "not touched"
    downtime: float | None = None


def _log(msg: str) -> None:
    click.echo(f"[rollout {time.strftime('%H:%M:%S')}] {msg}", err=True)


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--batches", default="1,25%", show_default=True,
              help="Ramp of batch sizes: host counts or percentages; the last entry repeats.")
@click.option("--max-fail", "max_fail", default="0", show_default=True,
              help="Halt after a batch once MORE than this many hosts (or N%) have failed.")
@click.option("--health-timeout", type=int, default=None, help="Override health_timeout_sec for the gate.")
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed), as in pyinfra.")
def rollout(inventory_file: str, deploy_file: str, batches: str, max_fail: str, health_timeout: int | None,
            limit: str | None) -> None:
    """Roll DEPLOY_FILE's release out: stage on every host, then switch batch by batch behind a gate."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyinfra.specfleet").setLevel(logging.INFO)  # host job progress and failures
    profile = deploy_profile(deploy_file)
    try:
        if profile is None:
            raise PlanError([f"{deploy_file}: not a profile deploy (no PROFILE); roll out eagle3/draft_target/baseline"])
        inventory, plans = fleet_plans(inventory_file, profile, resolve=True)
        # hub_mirror hosts serve no model: they are warmed before the stage, never switched
        targets = [h for h in select(inventory.hosts, inventory.groups, limit) if not plans[h].is_mirror]
        if not targets:
            raise PlanError([f"--limit {limit}: matches no serving host of the inventory"])
        sizes = parse_batches(batches, len(targets))
        tolerated = parse_max_fail(max_fail, len(targets))
    except (PlanError, ValueError) as exc:
        for line in getattr(exc, "lines", [str(exc)]):
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)

    rollout_id = uuid.uuid4().hex[:8]
    outcomes = {h: Outcome(h, new=plans[h].release_id) for h in targets}
    _log(f"{rollout_id}: {profile} to {len(targets)} host(s); batches {sizes}; halt when failures > {tolerated}")
    start = time.monotonic()

    # 0. lock every targeted host (refuse the whole rollout if another one holds a lock)
    held: dict[str, str] = {}
    lock_failed = run_on(plans, targets, lock, rollout_id, held)
    locked = [h for h in targets if h not in lock_failed]
    if held:
        run_on(plans, locked, unlock, rollout_id)
        for h, owner in held.items():
            click.echo(f"{h}: refused: another rollout holds the lock: {owner}", err=True)
        sys.exit(EXIT_REFUSED)
    failures: set[str] = set()
    for h in lock_failed:
        outcomes[h].result = "unreachable"
        failures.add(h)

    try:
        before = read_statuses(plans, locked)
        for h in locked:
            outcomes[h].old = before.get(h, {}).get("current") or "(none)"
        # 1a. the fleet's Hub mirror first: set up and warmed with what the hosts that download from it still need
        mirrors = [h for h in inventory.hosts if plans[h].is_mirror]
        users = [h for h in locked if plans[h].uses_mirror]
        mirror_failed: set[str] = set()
        if mirrors and users:
            _log(f"hub mirror {', '.join(mirrors)}: set up and warm it for {len(users)} host(s)")
            if set(mirrors) & run_on(plans, mirrors + users, warm_phase):
                url = plans[users[0]].mirror_url
                for h in users:
                    if plans[h].settings.hub_fallback:  # stages from the upstream Hub, saying so (steps/mirror.py)
                        plans[h].mirror_down = True
                        continue
                    outcomes[h].result = f"failed to stage: hub mirror {mirrors[0]} ({url}) failed to warm (still serving its old release)"
                    failures.add(h)
                    mirror_failed.add(h)
        # 1b. stage everywhere in parallel: nothing that serves changes
        staging = [h for h in locked if h not in mirror_failed]
        _log(f"stage on {len(staging)} host(s) at once: preflight, encodings, models, release files")
        staged_at = time.monotonic()
        stage_failed = run_on(plans, staging, stage)
        _log(f"stage done in {time.monotonic() - staged_at:.1f} s ({len(staging) - len(stage_failed)} of {len(staging)} staged)")
        for h in stage_failed:
            outcomes[h].result = "failed to stage (still serving its old release)"
            failures.add(h)
        ready = [h for h in targets if h not in failures]
        # 2. switch batch by batch in inventory order
        sizes = parse_batches(batches, len(ready)) if ready else []
        done = 0
        halted = len(failures) > tolerated
        if halted:
            _log(f"halting before any switch: {len(failures)} failure(s) > --max-fail {tolerated}")
        for index, size in enumerate(sizes, 1):
            if halted:
                break
            batch = ready[done:done + size]
            done += size
            _log(f"batch {index}/{len(sizes)}: switching {', '.join(batch)}")
            batch_failed = run_on(plans, batch, switch, health_timeout)
            after = read_statuses(plans, batch)
            for h in batch:
                info = after.get(h, {})
                gate = info.get("gate") or {}
                if h in batch_failed:
                    failures.add(h)
                    if not info:
                        outcomes[h].result = "unreachable during its switch"
                    elif info.get("current") == outcomes[h].old and info.get("active") == "active":
                        outcomes[h].result = "failed its gate; rolled back (serving the old release)"
                    else:
                        outcomes[h].result = f"failed (current {info.get('current')}, {info.get('active')})"
                else:
                    outcomes[h].result = "switched" if outcomes[h].old != outcomes[h].new else "already current"
                    if gate.get("release") == outcomes[h].new and outcomes[h].old != outcomes[h].new:
                        outcomes[h].downtime = gate.get("downtime_s")
                _log(f"  {h}: {outcomes[h].result}"
                     + (f" (switch downtime {outcomes[h].downtime:.1f}s)" if outcomes[h].downtime is not None else ""))
            if len(failures) > tolerated:
                halted = True
                rest = ready[done:]
                _log(f"halting: {len(failures)} failure(s) > --max-fail {tolerated}; not touched: {', '.join(rest) or 'none'}")
    finally:
        run_on(plans, locked, unlock, rollout_id)

    # 3. summary
    click.echo(f"\nrollout {rollout_id} ({profile}) in {time.monotonic() - start:.1f}s")
    width = max(len(h) for h in targets)
    click.echo(f"{'host'.ljust(width)}  {'old release':14}    {'new release':14}  {'downtime':>9}  result")
    for h in targets:
        o = outcomes[h]
        down = f"{o.downtime:.1f}s" if o.downtime is not None else "-"
        click.echo(f"{h.ljust(width)}  {o.old:14} -> {o.new:14}  {down:>9}  {o.result}")
    if halted:
        click.echo("result: HALTED (exit 1)")
        sys.exit(EXIT_HALTED)
    if failures:
        click.echo(f"result: PARTIAL, {len(failures)} host(s) failed within --max-fail {tolerated} (exit 3)")
        sys.exit(EXIT_PARTIAL)
    click.echo("result: SUCCESS (exit 0)")


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed).")
def releases(inventory_file: str, limit: str | None) -> None:
    """List each host's releases (newest first); * marks the current one, with its readiness gate result."""
    inventory, plans = fleet_plans_or_exit(inventory_file)
    hosts = select(inventory.hosts, inventory.groups, limit)
    statuses = read_statuses(plans, hosts)
    for h in hosts:
        info = statuses.get(h)
        if not info:
            click.echo(f"{h}: unreachable or no specfleet release yet")
            continue
        job = f", job {info['job']} running" if info.get("job") else ""
        click.echo(f"{h}: service {info.get('active') or '-'}, previous {info.get('previous') or '-'}{job}")
        gate = info.get("gate") or {}
        for rec in info.get("releases", []):
            mark = "*" if rec["id"] == info.get("current") else " "
            models = ", ".join(f"{m['repo']}@{m['commit'][:12]}" for m in rec.get("models", {}).values())
            gated = f"  gate {gate.get('result')} {gate.get('at', '')}" if gate.get("release") == rec["id"] else ""
            if mark == "*" and not gated:
                gated = "  gate not passed"
            click.echo(f"  {mark} {rec['id']}  {rec.get('created', '?')}  {rec.get('profile')}  {rec.get('image')}  {models}{gated}")
