"""`specfleet mirror status`: each hub_mirror host's service state, cached commits and free disk."""

from __future__ import annotations

import click

from ..mirror.render import advertised_url
from ..overview.run import read_mirrors
from ..pins.lockfile import LockError, lock_path, read_lock
from .invalid import exit_invalid, fleet_plans_or_exit


@click.group("mirror")
def cli() -> None:
    """The fleet's Hub mirror (hosts of the inventory group hub_mirror)."""


@cli.command("status")
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
def status(inventory_file: str) -> None:
    """Each mirror host: service state, cached repos/commits with bytes, free disk of its cache."""
    inventory, plans = fleet_plans_or_exit(inventory_file)
    mirrors = [h for h, plan in plans.items() if plan.is_mirror]
    if not mirrors:
        exit_invalid(["the inventory has no hub_mirror group"])
    found = read_mirrors(plans, mirrors)
    for name in mirrors:
        s, st = plans[name].settings, found.get(name)
        url = advertised_url(s, plans[name].connection)
        if st is None:
            click.echo(f"{name}: unreachable ({url})")
            continue
        click.echo(f"{name}: {url} (upstream {s.hub_endpoint}): olah {st.olah or 'not installed'}, "
                   f"service {st.service or '-'}, "
                   f"socket {st.socket or '-'}; cache {s.mirror_cache_dir}: {st.cached_bytes / 1e9:.2f} GB cached, "
                   f"{st.free_bytes / 1e9:.1f} GB free")
        for key, size in sorted(st.commits.items()):
            repo, _, commit = key.partition("/resolve/")
            click.echo(f"  {repo}@{commit[:12]}  {size / 1e9:.3f} GB")
        if s.image_mirror:
            pinned = _locked_digests(inventory.path)
            click.echo(f"{name}: image registry {s.image_registry}: service {st.registry[0] or '-'}, socket "
                       f"{st.registry[1] or '-'}; store {s.image_store_dir}: {(st.store_bytes or 0) / 1e9:.2f} GB of "
                       f"{s.image_store_budget_gb} GB (image_store_budget_gb), {len(st.stored)} image(s)")
            for repo, _tag, digest in sorted(st.stored):
                click.echo(f"  {repo}@{digest[:19]}  ({'pinned by the lock' if digest in pinned else 'not pinned'})")


def _locked_digests(fleet_file) -> set[str]:
    """The platform manifest digests the fleet's lock pins (none without a readable lock)."""
    try:
        lock = read_lock(lock_path(fleet_file))
    except LockError:
        return set()
    return {p["digest"] for entry in lock.images.values() for p in (entry.get("platforms") or {}).values()}
