"""`specfleet status` (one row per host from one read-only command per host) and `specfleet logs HOST [-f] [-n N]`
(the unit's journal over SSH). What they read: status.py; the rows: status_report.py."""

from __future__ import annotations

import json
import shlex
import sys

import click

from ..fleet.selection import select
from ..overview.report import gateway_rows, gateway_table, pair_rows, pools, rows, table
from ..overview.run import follow_journal, read_gateways, read_overviews, ssh_argv
from ..plan import PlanError, fleet_plans
from .invalid import invalid_input

EXIT_OK, EXIT_UNHEALTHY = 0, 1


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed), as in pyinfra.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (one object per host) instead of the table.")
@click.option("--metrics", is_flag=True,
              help="Also read /metrics (tokens/s, acceptance) where the release enables "
                   "iteration stats. It DRAINS trtllm-serve's queue; skipped on hosts a bench holds.")
def status(inventory_file: str, limit: str | None, as_json: bool, metrics: bool) -> None:
    """One row per host: release, profile, unit, /health, last gate, uptime, memory in use, disk free
    (and with --metrics tokens/s and acceptance). Read-only: one command per host.

    Exit 0: every host healthy; 1: a host is unreachable or unhealthy; 2: invalid input."""
    with invalid_input():
        inventory, plans = fleet_plans(inventory_file)
        hosts = select(inventory.hosts, inventory.groups, limit)
        if not hosts:
            raise PlanError([f"--limit {limit}: matches no host of the inventory"])
    gateways = [h for h in hosts if plans[h].is_gateway]
    sparks = [h for h in hosts if h not in gateways]
    pairs = {h: peer for h, p in plans.items() if p.settings.pair_role == "head" and (peer := p.settings.pair_peer)}
    peers = [pairs[h] for h in sparks if h in pairs and pairs[h] not in sparks]  # a head's row needs its worker
    overviews = read_overviews(plans, sparks + peers, metrics)
    rs = pair_rows(rows(sparks, overviews), overviews, pairs)  # a pair: one row, both hosts
    found = read_gateways(plans, gateways) if gateways else {}
    pool, grs = pools(found, sparks), gateway_rows(found)
    for r in rs:
        if gateways:
            r["pool"] = pool[r["host"]]
    if as_json:
        click.echo(json.dumps(rs + grs, indent=1))
    else:
        click.echo("\n".join(table(rs)))
        if gateways:
            click.echo("\n".join(gateway_table(grs, rs, pool)))
        if not metrics:
            click.echo("(tok/s and acceptance: pass --metrics; reading /metrics drains trtllm-serve's iteration stats)")
    sys.exit(EXIT_OK if all(r["healthy"] for r in rs + grs) else EXIT_UNHEALTHY)


@click.command()
@click.argument("host_name", metavar="HOST")
@click.option("--inventory", "inventory_file", default="inventory.py", show_default=True,
              type=click.Path(dir_okay=False), help="The project's inventory.py.")
@click.option("-f", "--follow", is_flag=True, help="Follow the journal until Ctrl-C.")
@click.option("-n", "--lines", type=click.IntRange(0, 1_000_000), default=100, show_default=True)
def logs(host_name: str, inventory_file: str, follow: bool, lines: int) -> None:
    """Print (or follow) the serving unit's journal on HOST (journalctl -u <the serving unit>) over SSH."""
    with invalid_input():
        inventory, plans = fleet_plans(inventory_file)
        if host_name not in plans:
            raise PlanError([f"{host_name}: not in the inventory (hosts: {', '.join(plans)})"])
        plan = plans[host_name]
        remote = (f"journalctl -u {shlex.quote(plan.settings.serving_unit)} -n {lines} --no-pager"
                  + (" -f" if follow else ""))
        argv = ssh_argv(host_name, plan.connection, remote)
    sys.exit(follow_journal(argv))
