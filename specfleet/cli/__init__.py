"""The `specfleet` command line: click only, and nothing in specfleet imports it but specfleet/__main__.py.

This module holds the `main` group, the commands that touch no host (check, render), and registers every command
family, one thin module each: rollout and releases (rollout.py), status and logs (status.py), bench (bench.py),
mirror status (mirror.py), the fleet's metrics for Prometheus and Grafana (metrics.py), lock and plan (lock.py), init
and vars (project.py). A command validates its input (invalid.py: one line per problem, exit 2), calls the layers
below it, and prints."""

from __future__ import annotations

import click

from ..deploy_scope import scope
from ..pins.lock_images import image_size_line
from ..pins.lockfile import LOCK_COMMAND, lock_path, shown
from ..plan import deploy_profile
from . import bench as _bench
from . import lock as _lock
from . import metrics as _metrics
from . import mirror as _mirror
from . import project as _project
from . import render as _render
from . import rollout as _rollout
from . import status as _status
from .invalid import deploy_plans, invalid_input


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specfleet", prog_name="specfleet", message="%(prog)s %(version)s",
                      help="Print the installed specfleet's version and exit.")
def main() -> None:
    """specfleet: speculative decoding with TensorRT-LLM (trtllm-serve) or vLLM (vllm serve) on DGX Spark fleets,
    on pyinfra."""


@main.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--hub", is_flag=True,
              help="Resolve model commits and check gated access on the Hub now (controller only) "
                   "instead of reading pins from the lock file.")
def check(inventory_file: str, deploy_file: str, hub: bool) -> None:
    """Validate every host for DEPLOY_FILE against the lock file without contacting any host: the hosts the deploy
    acts on, then the valid hosts it skips, each with why.

    Exit 0 when all hosts are valid; exit 2 with one line per problem (HOST: KEY: what is wrong; a problem several
    hosts share: GROUP (HOST, ...): KEY: ...).
    """
    with invalid_input():
        inventory, plans = deploy_plans(inventory_file, deploy_file, hub)
    profile = deploy_profile(deploy_file) or "(no profile)"
    acted, skipped = scope(plans, deploy_file)
    click.echo(f"{len(acted)} host(s) valid for {deploy_file} [{profile}]: {', '.join(acted) or 'none'}")
    if skipped:  # valid too, but this deploy leaves them alone
        click.echo(f"{len(skipped)} host(s) valid and skipped by {deploy_file}:")
        for host, why in skipped.items():
            click.echo(f"  {host}: {why}")
    for host, plan in plans.items():
        for role, pin in plan.pins.items():
            click.echo(f"  {host}: {role} {pin.repo}@{pin.commit[:12]} "
                       f"({len(pin.files)} files, {pin.size / 1e9:.2f} GB)")
    if not hub:  # the images the lock pins: one line each, its size per platform
        served = {p.image_upstream or p.settings.image: p for p in plans.values()
                  if p.settings.profile is not None and not p.skip}
        for image, plan in served.items():
            click.echo("  " + image_size_line(image, plan.image_digest, plan.image_platforms,
                                              shown(lock_path(inventory.path)), LOCK_COMMAND))
    for plan in plans.values():
        for note in plan.notes:
            click.echo(f"  {note}")


main.add_command(_render.render, "render")
main.add_command(_rollout.rollout, "rollout")
main.add_command(_rollout.releases, "releases")
main.add_command(_lock.lock, "lock")
main.add_command(_lock.plan_cmd, "plan")
main.add_command(_bench.bench, "bench")
main.add_command(_status.status, "status")
main.add_command(_status.logs, "logs")
main.add_command(_mirror.cli, "mirror")
main.add_command(_metrics.cli, "metrics")
main.add_command(_project.init, "init")
main.add_command(_project.vars_, "vars")
main.add_command(_project.profiles_cmd, "profiles")
