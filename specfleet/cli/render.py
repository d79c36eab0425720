"""`specfleet render`: every file a deploy would write on one host, contacting nothing (deploy_files.py says which)."""

from __future__ import annotations

import click

from ..deploy_files import deploy_writes
from ..deploy_scope import deploy_kind, skip_reason
from .invalid import deploy_plans, exit_invalid, invalid_input


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("deploy_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("host")
def render(inventory_file: str, deploy_file: str, host: str) -> None:
    """Print every file DEPLOY_FILE would write on HOST (secrets redacted), then name the ones whose content only the
    host has (downloads, the package's programs, what is generated there); contacts nothing.

    Exit 0; 2 on invalid input, an unknown host, or a host the deploy leaves alone (with the reason)."""
    with invalid_input():
        _, plans = deploy_plans(inventory_file, deploy_file, hub=False)
    if host not in plans:
        exit_invalid([f"{host}: not in the inventory (hosts: {', '.join(plans)})"])
    kind = deploy_kind(deploy_file)
    why = skip_reason(plans[host], kind, deploy_file)
    if why is not None:
        exit_invalid([f"{host}: {deploy_file} writes nothing there ({why})"])
    writes = deploy_writes(plans[host], kind)
    if not writes.shown and not writes.named:
        click.echo(f"# {deploy_file} writes no file on {host}"
                   + (" (it stops and removes what specfleet installed: the cleanup deploy)" if kind == "cleanup"
                      else " (it switches to a release the host keeps)" if kind == "rollback" else ""))
        return
    for path, content in writes.shown.items():
        click.echo(f"# ==> {path} <==")
        click.echo(content, nl=not content.endswith("\n"))
    if writes.named:
        click.echo("# not shown (their content is not known on the controller):")
        for path, why in writes.named.items():
            click.echo(f"#   {path}: {why}")
