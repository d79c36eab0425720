"""`specfleet lock` (pin every model and image the fleet uses, in `<fleet>.lock`) and `specfleet plan` (what a
converge would do on each host, read-only)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from pyinfra import host
from pyinfra.api import deploy

from .plan import EXIT_INVALID, PlanError, build_plans, deploy_profile, load_inventory_or_fail
from .profiles import PROFILES
from .project import use_project
from .settings import build_fleet

EXIT_UNREACHABLE, EXIT_CHANGES = 1, 10


def _fail(lines: list[str]) -> None:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(EXIT_INVALID)


@click.command()
@click.argument("args", nargs=-1, metavar="inventory.py [REPO ...]")
@click.option("--upgrade", is_flag=True, help="Resolve the pins again (all, or only the named model repos / images) "
                                               "and print old -> new.")
@click.option("--profile", type=click.Choice(sorted(PROFILES)), default=None,
              help="Lock only what this profile needs (default: every profile, for every host).")
def lock(args: tuple[str, ...], upgrade: bool, profile: str | None) -> None:
    """Pin every model revision (commit + the files the server reads) and image (registry digest) the fleet
    file's hosts use, in <fleet file>.lock next to it. Existing pins are kept; --upgrade moves them.

    Exit 0 when the lock was written; 2 on invalid input or when the Hub refused (nothing written)."""
    inventory_file, *repos = args or ("inventory.py",)
    if not inventory_file.endswith(".py"):  # `specfleet lock --upgrade REPO`: inventory.py implied
        inventory_file, repos = "inventory.py", list(args)
    if Path(inventory_file).name != "inventory.py":
        _fail([f"{inventory_file}: expected specfleet's inventory.py (the fleet file itself is named by SPECFLEET_INVENTORY)"])
    use_project(inventory_file)
    if repos and not upgrade:
        _fail([f"{' '.join(repos)}: naming repos only makes sense with --upgrade (specfleet lock --upgrade REPO ...)"])
    try:
        inventory = load_inventory_or_fail()
    except PlanError as exc:
        _fail(exc.lines)
    from .lockfile import update_lock

    fleets, problems, skipped = {}, {}, []
    for name in ([profile] if profile else sorted(PROFILES)):
        fleet, probs = build_fleet(inventory, name)
        bad = {p.host for p in probs}
        fleets[name] = {h: s for h, s in fleet.items() if h not in bad}
        for p in probs:
            problems.setdefault(p.host, {}).setdefault(name, []).append(str(p))
    lines: list[str] = []
    for h, per_profile in problems.items():
        if len(per_profile) == len(fleets):  # valid for no profile: a real error
            lines += list(dict.fromkeys(line for probs in per_profile.values() for line in probs))
        else:
            skipped += [f"{h}: not valid for profile {name}, not locked for it ({probs[0].split(': ', 1)[1]})"
                        for name, probs in per_profile.items()]
    if lines:
        _fail(lines)
    result = update_lock(fleets, inventory.path, upgrade=upgrade, only=tuple(repos), prune=profile is None,
                         skip_unknown_revisions=profile is None)
    if result.problems:
        _fail(result.problems)
    for line in skipped + result.lines:
        click.echo(line)


@click.command("plan")
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed), as in pyinfra.")
def plan_cmd(inventory_file: str, deploy_file: str, limit: str | None) -> None:
    """Print what `pyinfra inventory.py DEPLOY_FILE` would do on each host (release, restart and why, bytes to
    fetch, unit/token rewrites, users added), from the status read a converge makes. Changes nothing.

    Exit 0: nothing would change; 10: something would; 2: invalid input; 1: a host is unreachable."""
    from .rollout import select

    profile = deploy_profile(deploy_file)
    try:
        if profile is None:
            raise PlanError([f"{deploy_file}: not a profile deploy (no PROFILE); plan eagle3/draft_target/baseline"])
        if Path(inventory_file).name != "inventory.py":
            raise PlanError([f"{inventory_file}: expected specfleet's inventory.py (the fleet file itself is named by SPECFLEET_INVENTORY)"])
        use_project(inventory_file)
        inventory = load_inventory_or_fail()
        targets = select(inventory.hosts, inventory.groups, limit)
        if not targets:
            raise PlanError([f"--limit {limit}: matches no host of the inventory"])
        plans = build_plans(inventory, profile)
    except PlanError as exc:
        _fail(exc.lines)
    found, unreachable = read_changes(plans, targets)
    lines, code = report(targets, found, unreachable)
    for line in lines:
        click.echo(line)
    sys.exit(code)


@deploy("Plan (read only)")
def collect(out: dict):
    """Read the host's status (the SpecfleetHost fact a converge reads) and decide what would change."""
    from .steps._common import changes, current_plan, host_status

    plan = current_plan()
    st = host_status(plan)
    out[host.name] = (changes(plan), st.active == "active" and st.container_running)


def read_changes(plans, hosts) -> tuple[dict, set[str]]:
    """Per host: (Changes, serving) from one status read over pyinfra, read-only; and the unreachable hosts."""
    from .rollout import run_on

    out: dict = {}
    failed = run_on(plans, hosts, collect, out)
    return out, failed


def report(targets: list[str], found: dict, unreachable: set[str]) -> tuple[list[str], int]:
    """The plan's lines and exit code (0 nothing would change, 10 something would, 1 a host is unreachable)."""
    lines: list[str] = []
    changed = 0
    for h in targets:
        if h in unreachable or h not in found:
            lines.append(f"{h}: UNREACHABLE (status not read)")
            continue
        host_lines = describe(h, found[h])
        changed += len(host_lines) > 1
        lines += host_lines
    restarts = [h for h in targets if h in found and found[h][1] and found[h][0].restart]
    lines.append(f"\n{changed} of {len(targets)} host(s) would change; {len(restarts)} serving host(s) would restart"
                 + ("; a converge restarts them all at once, specfleet rollout switches them in batches"
                    if len(restarts) > 1 else ""))
    if unreachable or len(found) < len(targets):
        return lines, EXIT_UNREACHABLE
    return lines, EXIT_CHANGES if changed else 0


def describe(name: str, found) -> list[str]:
    ch, serving = found
    head = f"{name}: release {ch.current or '(none)'} -> {ch.release}" if ch.current != ch.release else f"{name}: release {ch.release}"
    lines = ch.lines()
    if not lines:
        return [f"{head}: nothing to do"]
    out = [f"{head}: {len(lines)} change(s)"]
    restart = ch.restart
    out.append("  restart: " + (f"yes ({'; '.join(restart)})" if restart else "no")
               + ("" if serving or not restart else " (not serving now)"))
    others = [why for kind, why in ch.switch if why not in restart]
    if others:
        out.append(f"  activate without restart: {'; '.join(others)}")
    for f in ch.fetches:
        out.append(f"  fetch {f.role} {f.repo}@{f.commit[:12]}: {f.files} file(s), {f.bytes:,} bytes"
                   + (f" (+{f.links} draft link(s))" if f.links else ""))
    if ch.pull:
        out.append(f"  pull image {ch.pull}")
    out.append(f"  unit rewrite: {'yes' if ch.unit_rewrite else 'no'}")
    out.append(f"  token: {ch.token or 'unchanged'}")
    if ch.users:
        out.append(f"  docker group: add {', '.join(ch.users)}")
    if ch.install:
        out.append(f"  install {ch.install} in the fetch venv")
    if ch.writes:
        out.append(f"  write {len(ch.writes)} managed file(s): {', '.join(ch.writes[:6])}{' ...' if len(ch.writes) > 6 else ''}")
    return out
