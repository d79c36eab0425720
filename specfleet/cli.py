"""The `specfleet` command: commands that touch no host (check, render), plus the VM fleet and rollouts."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .project import use_project
from .plan import EXIT_INVALID, PlanError, build_plans, deploy_profile, load_inventory_or_fail


def _plans(inventory_file: str, deploy_file: str, hub: bool):
    if Path(inventory_file).name != "inventory.py":
        raise PlanError([f"{inventory_file}: expected specfleet's inventory.py (the fleet file itself is named by SPECFLEET_INVENTORY)"])
    use_project(inventory_file)  # its directory is the project (fleet file default, group_data/all.py)
    profile = deploy_profile(deploy_file)
    return build_plans(load_inventory_or_fail(), profile, live=hub)  # pins: the lock file, or the Hub with --hub


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """specfleet: trtllm-serve speculative decoding on DGX Spark fleets, on pyinfra."""


@main.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--hub", is_flag=True, help="Resolve model commits and check gated access on the Hub now (controller only) "
                                          "instead of reading pins from the lock file.")
def check(inventory_file: str, deploy_file: str, hub: bool) -> None:
    """Validate every host for DEPLOY_FILE without contacting any host.

    Exit 0 when all hosts are valid; exit 2 with one line per problem (HOST: KEY: what is wrong).
    """
    try:
        plans = _plans(inventory_file, deploy_file, hub)
    except PlanError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)
    profile = deploy_profile(deploy_file) or "(no profile)"
    click.echo(f"{len(plans)} host(s) valid for {deploy_file} [{profile}]: {', '.join(plans)}")
    for host, plan in plans.items():
        for role, pin in plan.pins.items():
            click.echo(f"  {host}: {role} {pin.repo}@{pin.commit[:12]} ({len(pin.files)} files, {pin.size / 1e9:.2f} GB)")


@main.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("host")
def render(inventory_file: str, deploy_file: str, host: str) -> None:
    """Print every file DEPLOY_FILE would write on HOST (the token redacted); contacts nothing."""
    try:
        plans = _plans(inventory_file, deploy_file, hub=False)
    except PlanError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)
    if host not in plans:
        click.echo(f"{host}: not in the inventory (hosts: {', '.join(plans)})", err=True)
        sys.exit(EXIT_INVALID)
    if plans[host].settings.profile is None:
        click.echo(f"{deploy_file}: this deploy writes no files (it has no PROFILE)", err=True)
        sys.exit(EXIT_INVALID)
    for path, content in plans[host].files(redact=True).items():
        click.echo(f"# ==> {path} <==")
        click.echo(content, nl=not content.endswith("\n"))


from . import project as _project  # noqa: E402
from . import rollout as _rollout  # noqa: E402
from . import vm as _vm  # noqa: E402

main.add_command(_vm.cli, "vm")
main.add_command(_rollout.rollout, "rollout")
main.add_command(_rollout.releases, "releases")
from . import fleetstate as _fleetstate  # noqa: E402

main.add_command(_fleetstate.lock, "lock")
main.add_command(_fleetstate.plan_cmd, "plan")
from . import bench as _bench  # noqa: E402

main.add_command(_bench.bench, "bench")
from . import status as _status  # noqa: E402

main.add_command(_status.status, "status")
main.add_command(_status.logs, "logs")
from . import mirror as _mirror  # noqa: E402

main.add_command(_mirror.cli, "mirror")
main.add_command(_project.init, "init"); main.add_command(_project.vars_, "vars")  # noqa: E702

if __name__ == "__main__":
    main()
