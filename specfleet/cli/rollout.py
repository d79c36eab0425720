"""`specfleet rollout` (stage everywhere, then switch batch by batch behind a readiness gate: rollout.py) and
`specfleet releases` (each host's releases)."""

from __future__ import annotations

import logging
import sys
import time

import click

from ..constants import EXIT_UNREACHABLE
from ..fleet import run as runner
from ..fleet.selection import parse_batches, parse_max_fail, select, whole_model_batches
from ..overview.report import gate_memory
from ..plan import PlanError, deploy_profile, fleet_plans, role_problems
from ..serving.run import rollout as engine
from .invalid import fleet_plans_or_exit, invalid_input


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
@click.option("--without-gateway", "without_gateways", multiple=True, metavar="HOST",
              help="Roll out even though this gateway host cannot be reached (repeatable); by default a gateway that "
                   "does not answer refuses the rollout before anything changes.")
def rollout(inventory_file: str, deploy_file: str, batches: str, max_fail: str, health_timeout: int | None,
            limit: str | None, without_gateways: tuple[str, ...]) -> None:
    """Roll DEPLOY_FILE's release out: stage on every host, then switch batch by batch behind a gate."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyinfra.specfleet").setLevel(logging.INFO)  # host job progress and failures
    profile = deploy_profile(deploy_file)
    with invalid_input(ValueError):
        if profile is None:
            raise PlanError([f"{deploy_file}: not a profile deploy (no PROFILE); "
                             "roll out eagle3/draft_target/baseline"])
        inventory, plans = fleet_plans(inventory_file, profile, resolve=True)
        if problems := role_problems(plans, [deploy_file]):
            raise PlanError(problems)
        # hub_mirror hosts serve no model: they are warmed before the stage, never switched; gateways and Sparks
        # that serve another profile are not this rollout's
        targets = [h for h in select(inventory.hosts, inventory.groups, limit)
                   if not (plans[h].is_mirror or plans[h].skip)]
        if not targets:
            raise PlanError([f"--limit {limit}: matches no serving host of the inventory"])
        tolerated = _batches_checked(plans, targets, batches, max_fail)
        gateways = [h for h in inventory.hosts if plans[h].is_gateway]
        for g in without_gateways:
            if g not in gateways:
                raise PlanError([f"--without-gateway {g}: not a host of the gateway group "
                                 f"(gateways: {', '.join(gateways) or 'none'})"])
    r = engine.Rollout(profile, plans, mirrors=[h for h in inventory.hosts if plans[h].is_mirror], targets=targets,
                       batches=batches, tolerated=tolerated, health_timeout=health_timeout, log=_log,
                       gateways=gateways, without_gateways=list(without_gateways))
    engine.run(r)
    if r.gateways_down:
        for g, why in r.gateways_down.items():
            click.echo(f"{g}: refused: gateway cannot be reached ({why}); nothing changed. Bring it back, or "
                       f"roll out without it: --without-gateway {g}", err=True)
        sys.exit(engine.EXIT_REFUSED)
    if r.refused:
        for h, owner in r.refused.items():
            click.echo(f"{h}: refused: another rollout holds the lock: {owner}", err=True)
        sys.exit(engine.EXIT_REFUSED)
    lines, code = engine.summary(r)
    click.echo("\n".join(lines))
    if code:
        sys.exit(code)


def _batches_checked(plans, targets: list[str], batches: str, max_fail: str) -> int:
    """The failures tolerated, once the batches are sound: a pair named whole and counted once (its head), no batch
    that switches every Spark of a model behind gateways at once (PlanError or ValueError otherwise)."""
    if lone := engine.lone_pair_hosts(plans, targets):
        raise PlanError(lone)
    leaders = [unit[0] for unit in engine.units_of(plans, targets)]
    parse_batches(batches, len(leaders))
    peers = {h: (plans[h].settings.profile["target"]["repo"], plans[h].settings.model_peers) for h in leaders
             if plans[h].settings.gateways}
    if whole := whole_model_batches(batches, leaders, peers):
        raise PlanError(whole)
    return parse_max_fail(max_fail, len(leaders))


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed).")
def releases(inventory_file: str, limit: str | None) -> None:
    """List each host's releases (newest first); * marks the current one, with its readiness gate result. A two-Spark
    pair is listed once, under its head: the pair's releases are the head's, each naming its worker's release.

    Exit 0: every host was read; 1: a host is unreachable (UNREACHABLE, its releases not listed); 2: invalid
    input."""
    inventory, plans = fleet_plans_or_exit(inventory_file)
    hosts = select(inventory.hosts, inventory.groups, limit)
    statuses = runner.read_statuses(plans, hosts)
    workers = {peer: h for h in hosts
               if plans[h].settings.pair_role == "head" and (peer := plans[h].settings.pair_peer) in hosts}
    for h in hosts:
        if h in workers:
            continue  # under its head
        info = statuses.get(h)
        if not info:
            click.echo(f"{h}: {_unread(h, statuses)}")
            continue
        job = f", job {info['job']} running" if info.get("job") else ""
        click.echo(f"{h}: service {info.get('active') or '-'}, previous {info.get('previous') or '-'}{job}")
        gate = info.get("gate") or {}
        for rec in info.get("releases", []):
            mark = "*" if rec["id"] == info.get("current") else " "
            models = ", ".join(f"{m['repo']}@{m['commit'][:12]}" for m in rec.get("models", {}).values())
            memory = f" (MemAvailable {gate_memory(gate)})" if gate_memory(gate) else ""
            ours = gate.get("release") == rec["id"]
            gated = f"  gate {gate.get('result')} {gate.get('at', '')}{memory}" if ours else ""
            if mark == "*" and not gated:
                gated = "  gate not passed"
            worker = ((rec.get("pair") or {}).get("worker") or {}).get("release")
            click.echo(f"  {mark} {rec['id']}  {rec.get('created', '?')}  {rec.get('profile')}  "
                       f"{rec.get('image')}  {models}{gated}" + (f"  worker {worker}" if worker else ""))
        for w in [w for w, head in workers.items() if head == h]:
            click.echo("  " + _worker_line(w, statuses))
    if any(h not in statuses for h in hosts):
        sys.exit(EXIT_UNREACHABLE)


def _unread(host: str, statuses: dict[str, dict]) -> str:
    """What `releases` says of a host without a release to list: its status was not read, or it has none yet."""
    return "no specfleet release yet" if host in statuses else runner.UNREAD


def _worker_line(worker: str, statuses: dict[str, dict]) -> str:
    """A pair's worker under its head in `releases`: the release it holds and its side's result."""
    info = statuses.get(worker)
    if not info:
        return f"worker {worker}: {_unread(worker, statuses)}"
    gate = info.get("gate") or {}
    side = gate.get("result") if gate.get("release") == info.get("current") else "not started"
    return f"worker {worker}: holds {info.get('current') or '-'} (its side {side}), service {info.get('active') or '-'}"
