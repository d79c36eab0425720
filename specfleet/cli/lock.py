"""`specfleet lock` (pin every model and image the fleet uses, in `<fleet>.lock`) and `specfleet plan` (what a
converge would do on each host, read-only)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..fleet import run as runner
from ..fleet.profiles import profiles
from ..fleet.selection import select
from ..gateway.steps.gateways import gateway_plan
from ..mirror.steps.hub import mirror_plan
from ..pins.lockfile import fleets_to_lock, update_lock
from ..plan import PlanError, build_plans, deploy_constant, deploy_profile, load_inventory_or_fail, role_problems
from ..serving.run.preview import counted, exit_code, read_changes, report
from .invalid import exit_invalid, invalid_input, use_inventory_py


@click.command()
@click.argument("args", nargs=-1, metavar="inventory.py [REPO ...]")
@click.option("--upgrade", is_flag=True, help="Resolve the pins again (all, or only the named model repos / images) "
                                               "and print old -> new.")
@click.option("--profile", default=None,
              help="Lock only what this profile needs (default: every profile, for every host).")
def lock(args: tuple[str, ...], upgrade: bool, profile: str | None) -> None:
    """Pin every model revision (commit + the files the server reads) and image (registry digest) the fleet
    file's hosts use, in <fleet file>.lock next to it. Existing pins are kept; --upgrade moves them.

    Exit 0 when the lock was written; 2 on invalid input (HOST: KEY: ...) or when a look-up the controller makes
    failed (controller: ...: the Hub, or the registry of a pinned image --upgrade moves); then nothing is written."""
    inventory_file, *repos = args or ("inventory.py",)
    if not inventory_file.endswith(".py"):  # `specfleet lock --upgrade REPO`: inventory.py implied
        inventory_file, repos = "inventory.py", list(args)
    with invalid_input():
        use_inventory_py(inventory_file)
        if profile is not None and profile not in (known := profiles()):
            exit_invalid([f"--profile: unknown profile {profile!r} (allowed: {', '.join(sorted(known))})"])
    if repos and not upgrade:
        exit_invalid([f"{' '.join(repos)}: naming repos only makes sense with --upgrade "
                      "(specfleet lock --upgrade REPO ...)"])
    with invalid_input():
        inventory = load_inventory_or_fail()
    with invalid_input():
        fleets, errors, notes = fleets_to_lock(inventory, profile)
    if errors:
        exit_invalid(errors)
    result = update_lock(fleets, inventory.path, upgrade=upgrade, only=tuple(repos), prune=profile is None,
                         skip_unknown_revisions=profile is None)
    if result.problems:
        exit_invalid(result.problems)
    for line in notes + result.lines:
        click.echo(line)


@click.command("plan")
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed), as in pyinfra.")
def plan_cmd(inventory_file: str, deploy_file: str, limit: str | None) -> None:
    """Print what `pyinfra inventory.py DEPLOY_FILE` would do on each host (release, restart and why, bytes to
    fetch, unit/token rewrites, users added), from the status read a converge makes. Changes nothing.

    Exit 0: nothing would change; 10: something would; 2: invalid input; 1: a host is unreachable."""
    profile = deploy_profile(deploy_file)
    if profile is None and deploy_constant(deploy_file, "ROLE") == "gateway":
        sys.exit(_plan_role(inventory_file, limit, "gateway", gateway_plan))
    if profile is None and (deploy_constant(deploy_file, "ROLE") == "hub_mirror"
                            or Path(deploy_file).name == "hub_mirror.py"):  # a project made before deploys had ROLE
        sys.exit(_plan_role(inventory_file, limit, "hub_mirror", mirror_plan))
    with invalid_input():
        if profile is None:
            raise PlanError([f"{deploy_file}: not a profile deploy (no PROFILE); "
                             "plan eagle3/draft_target/baseline, or gateway"])
        use_inventory_py(inventory_file)
        inventory = load_inventory_or_fail()
        targets = select(inventory.hosts, inventory.groups, limit)
        if not targets:
            raise PlanError([f"--limit {limit}: matches no host of the inventory"])
        plans = build_plans(inventory, profile)
        if problems := role_problems(plans, [deploy_file]):
            raise PlanError(problems)
    skipped = {h: reason for h in targets if (reason := plans[h].skip)}
    found, unreachable = read_changes(plans, [h for h in targets if h not in skipped])
    lines, code = report(targets, found, unreachable, skipped)
    for line in lines:
        click.echo(line)
    sys.exit(code)


def _plan_role(inventory_file: str, limit: str | None, group: str, read) -> int:
    """`specfleet plan inventory.py deploys/gateway.py` (or hub_mirror.py): what that deploy would do on each host of
    its group, from `read` (a read-only pyinfra deploy putting each host's lines in a dict)."""
    with invalid_input():
        use_inventory_py(inventory_file)
        inventory = load_inventory_or_fail()
        plans = build_plans(inventory, None)
        targets = [h for h in select(inventory.hosts, inventory.groups, limit) if h in inventory.groups.get(group, ())]
        if not targets:
            raise PlanError([f"{'--limit ' + limit + ': matches' if limit else 'the inventory has'} no host of the "
                             f"{group} group"])
    found: dict = {}
    unreachable = runner.run_on(plans, targets, read, found)
    unread = [h for h in targets if h in unreachable or found.get(h) is None]
    changed = 0
    for h in targets:
        if h in unread:
            click.echo(f"{h}: {runner.UNREAD}")
            continue
        lines = found[h]
        changed += bool(lines)
        click.echo(f"{h}: {group}: " + (f"{len(lines)} change(s)" if lines else "nothing to do"))
        for line in lines:
            click.echo(f"  {line}")
    click.echo("\n" + counted(changed, len(targets), len(unread), f"{group} "))
    return exit_code(changed, len(unread))
