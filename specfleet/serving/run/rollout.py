"""Fleet rollouts: lock every targeted host, warm the fleet's Hub mirror, stage everywhere, then switch batch by batch
behind the readiness gate, halting once failures exceed the tolerance; the hosts are unlocked whatever happens.

Built on pyinfra's Python API (runner.run_on): one State per phase/batch, hosts in inventory order (pyinfra's own
--serial order is random, so batching is done here). The command line (cli/rollout.py) validates the input, calls
`run` and prints `summary`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ...fleet import run as runner
from ...fleet.model import fleet_address
from ...fleet.selection import members, parse_batches
from ...fleet.steps.lock import unlock
from ...gateway.steps.gateways import gateway_alive
from ...mirror.steps.hub import warm_phase
from ...plan import HostPlan
from ...steps import stage, switch

EXIT_OK, EXIT_HALTED, EXIT_PARTIAL, EXIT_REFUSED = 0, 1, 3, 4


@dataclass
class Outcome:
    host: str
    old: str = "-"
    new: str = "-"
    result: str = "not touched"
    downtime: float | None = None


def units_of(plans: dict[str, HostPlan], targets: list[str]) -> list[list[str]]:
    """The targets as a batch counts them: a Spark, or a pair (head, worker), which switches as one."""
    pairs = {h: peer for h in targets
             if plans[h].settings.pair_role == "head" and (peer := plans[h].settings.pair_peer) in targets}
    return members(targets, pairs)


def lone_pair_hosts(plans: dict[str, HostPlan], targets: list[str]) -> list[str]:
    """A problem line per target whose pair's other host is not a target: a pair rolls out as one."""
    return [f"{h}: {s.pair}: --limit names {h} without its pair's {s.pair_peer} (a pair rolls out as one: name both, "
            f"or the group {s.pair})" for h in targets if (s := plans[h].settings).pair and s.pair_peer not in targets]


@dataclass
class Rollout:
    """One rollout: what it was asked (plans, mirror hosts, targets in inventory order, batches, tolerance) and,
    as it goes, what happened to each host."""

    profile: str
    plans: dict[str, HostPlan]
    mirrors: list[str]  # the inventory's hub_mirror hosts: warmed before the stage, never switched
    targets: list[str]
    batches: str  # the --batches ramp, applied to the hosts that staged
    tolerated: int  # halt once failures exceed this
    health_timeout: int | None = None
    log: Callable[[str], None] = print
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    failures: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)  # host -> the owner of the lock it holds for another run
    gateways: list[str] = field(default_factory=list)  # the fleet's gateway hosts, checked before anything starts
    without_gateways: list[str] = field(default_factory=list)  # --without-gateway: proceed even if these are down
    gateways_down: dict[str, str] = field(default_factory=dict)  # gateway -> why it cannot be reached (refused)
    halted: bool = False
    seconds: float = 0.0

    @property
    def units(self) -> list[list[str]]:
        return units_of(self.plans, self.targets)

    def unit_of(self, h: str) -> list[str]:
        return next(u for u in self.units if h in u)

    def fail(self, h: str, result: str) -> None:
        """A failure counts once per unit: its first host's (a pair's head); its other host says it went with it."""
        unit = self.unit_of(h)
        self.outcomes[h].result = result
        for other in unit:
            if other != h and self.outcomes[other].result in ("not touched", self.outcomes[h].result):
                self.outcomes[other].result = f"with its pair's {h}: {result}"
        self.failures.add(unit[0])


def run(r: Rollout) -> None:
    """Lock, warm the mirror, stage, switch in batches, unlock. Refused (r.refused, nothing done) when another run
    holds a lock on a targeted host."""
    r.outcomes = {h: Outcome(h, new=r.plans[h].release_id) for h in r.targets}
    r.log(f"{r.id}: {r.profile} to {len(r.targets)} host(s); batches {parse_batches(r.batches, len(r.units))}; "
          f"halt when failures > {r.tolerated}")
    start = time.monotonic()
    if _gateways_down(r):
        return
    locked, lock_failed, r.refused = runner.lock_hosts(r.plans, r.targets, r.id)
    if r.refused:
        return
    for h in lock_failed:
        r.fail(h, "unreachable")
    try:
        before = runner.read_statuses(r.plans, locked)
        for h in locked:
            r.outcomes[h].old = before.get(h, {}).get("current") or "(none)"
        mirror_failed = _warm_mirror(r, locked)
        _stage(r, [h for h in locked if h not in mirror_failed])
        _switch_batches(r, [h for h in r.targets if h not in r.failures])
    finally:
        runner.run_on(r.plans, locked, unlock, r.id)
    r.seconds = time.monotonic() - start


def _gateways_down(r: Rollout) -> bool:
    """0. Every gateway must answer before anything starts (its Sparks' drains wait for it to take them out); one
    that cannot be reached refuses the rollout, unless --without-gateway names it."""
    checked = [g for g in r.gateways if g not in r.without_gateways]
    if not checked:
        return False
    found: dict[str, str] = {}
    unreachable = runner.run_on(r.plans, checked, gateway_alive, found)
    r.gateways_down = {g: "unreachable over SSH" if g in unreachable else found.get(g, "no answer")
                       for g in checked if g in unreachable or found.get(g, "no answer")}
    for g in sorted(set(r.gateways) & set(r.without_gateways)):
        r.log(f"gateway {g}: not checked (--without-gateway); its Sparks' drains wait for it a few check intervals")
    return bool(r.gateways_down)


def _skipped_addresses(r: Rollout) -> tuple[str, ...]:
    """The addresses (as the Sparks know them) of the gateways --without-gateway names."""
    return tuple(fleet_address(dict(r.plans[g].settings), r.plans[g].connection, g) for g in r.without_gateways)


def _warm_mirror(r: Rollout, locked: list[str]) -> set[str]:
    """1a. The fleet's Hub mirror first: set up and warmed with what the hosts that download from it still need.
    Returns the hosts that cannot stage because it failed (those without hub_fallback)."""
    users = [h for h in locked if r.plans[h].uses_mirror]
    failed: set[str] = set()
    if not (r.mirrors and users):
        return failed
    r.log(f"hub mirror {', '.join(r.mirrors)}: set up and warm it for {len(users)} host(s)")
    if set(r.mirrors) & runner.run_on(r.plans, r.mirrors + users, warm_phase):
        url = r.plans[users[0]].mirror_url
        for h in users:
            if r.plans[h].settings.hub_fallback:  # stages from the upstream Hub, saying so (mirror/steps/hub.py)
                r.plans[h].mirror_down = True
                continue
            r.fail(h, f"failed to stage: hub mirror {r.mirrors[0]} ({url}) failed to warm "
                      "(still serving its old release)")
            failed.add(h)
    return failed


def _stage(r: Rollout, staging: list[str]) -> None:
    """1b. Stage everywhere in parallel: nothing that serves changes."""
    r.log(f"stage on {len(staging)} host(s) at once: preflight, encodings, models, release files")
    staged_at = time.monotonic()
    stage_failed = runner.run_on(r.plans, staging, stage)
    r.log(f"stage done in {time.monotonic() - staged_at:.1f} s "
          f"({len(staging) - len(stage_failed)} of {len(staging)} staged)")
    for h in stage_failed:
        r.fail(h, "failed to stage (still serving its old release)")


def _switch_batches(r: Rollout, ready: list[str]) -> None:
    """2. Switch batch by batch in inventory order, a pair as one member of its batch (both hosts run the switch; the
    head's job switches both); halt once failures exceed the tolerance."""
    units = [u for u in r.units if u[0] in ready and not set(u) & r.failures]
    sizes = parse_batches(r.batches, len(units)) if units else []
    done = 0
    r.halted = len(r.failures) > r.tolerated
    if r.halted:
        r.log(f"halting before any switch: {len(r.failures)} failure(s) > --max-fail {r.tolerated}")
        return
    for index, size in enumerate(sizes, 1):
        batch_units = units[done:done + size]
        done += size
        batch = [h for u in batch_units for h in u]
        r.log(f"batch {index}/{len(sizes)}: switching {', '.join('+'.join(u) for u in batch_units)}")
        batch_failed = runner.run_on(r.plans, batch, switch, r.health_timeout, _skipped_addresses(r))
        after = runner.read_statuses(r.plans, batch)
        for u in batch_units:  # a pair by its head: the head's job switched both, and its gate is the pair's
            _record_switch(r, u, u[0] in batch_failed, after)
        if len(r.failures) > r.tolerated:
            r.halted = True
            r.log(f"halting: {len(r.failures)} failure(s) > --max-fail {r.tolerated}; not touched: "
                  f"{', '.join('+'.join(u) for u in units[done:]) or 'none'}")
            return


def _record_switch(r: Rollout, unit: list[str], failed: bool, after: dict) -> None:
    """A member's outcome from its first host's status (a pair's head: its gate is the pair's); a pair's worker is
    recorded with it."""
    h, info = unit[0], after.get(unit[0], {})
    o = r.outcomes[h]
    gate = info.get("gate") or {}
    if failed:
        r.failures.add(h)
        if not info:
            o.result = "unreachable during its switch"
        elif info.get("current") == o.old and info.get("active") == "active":
            o.result = "failed its gate; rolled back (serving the old release)"
        else:
            o.result = f"failed (current {info.get('current')}, {info.get('active')})"
    else:
        o.result = "switched" if o.old != o.new else "already current"
        if gate.get("release") == o.new and o.old != o.new:
            o.downtime = gate.get("downtime_s")
    for other in unit[1:]:
        r.outcomes[other].result = f"with its pair's {h}: {o.result}"
    r.log(f"  {'+'.join(unit)}: {o.result}"
          + (f" (switch downtime {o.downtime:.1f}s)" if o.downtime is not None else ""))


def summary(r: Rollout) -> tuple[list[str], int]:
    """3. The summary table and result line, and the exit code (0 success, 1 halted, 3 partial)."""
    lines = [f"\nrollout {r.id} ({r.profile}) in {r.seconds:.1f}s"]
    names = {u[0]: "+".join(u) for u in r.units}  # a pair: one row, its head's releases (the pair's)
    width = max(len(n) for n in names.values())
    lines.append(f"{'host'.ljust(width)}  {'old release':14}    {'new release':14}  {'downtime':>9}  result")
    for h, name in names.items():
        o = r.outcomes[h]
        down = f"{o.downtime:.1f}s" if o.downtime is not None else "-"
        lines.append(f"{name.ljust(width)}  {o.old:14} -> {o.new:14}  {down:>9}  {o.result}")
    if r.halted:
        return lines + ["result: HALTED (exit 1)"], EXIT_HALTED
    if r.failures:
        lines.append(f"result: PARTIAL, {len(r.failures)} member(s) failed within --max-fail {r.tolerated} (exit 3)")
        return lines, EXIT_PARTIAL
    return lines + ["result: SUCCESS (exit 0)"], EXIT_OK
