"""`specfleet metrics scrape-config` and `specfleet metrics dashboard`: what a Prometheus and a Grafana that the
operator runs need to watch the fleet (specfleet deploys neither; docs/gateway.md, "Fleet metrics")."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import click

from ..engines.catalog import engine_of
from ..fleet.model import fleet_address
from ..fleet.profiles import profiles
from ..gateway.render import server_name
from ..gateway.scrape import Gateway, Relayed, scrape_config
from .invalid import exit_invalid, fleet_plans_or_exit

DASHBOARD = "specfleet-fleet.json"  # package data: specfleet/gateway/dashboards/


@click.group("metrics")
def cli() -> None:
    """The fleet's metrics for a Prometheus and a Grafana of your own."""


def _write(text: str, out: str | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    Path(out).write_text(text)
    click.echo(f"wrote {out}", err=True)


@cli.command("scrape-config")
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write it to this file instead of printing it.")
def scrape_config_cmd(inventory_file: str, out: str | None) -> None:
    """Prometheus scrape_configs for the gateways' exporter and each Spark's engine metrics, relayed by a gateway.
    Contacts no host."""
    _, plans = fleet_plans_or_exit(inventory_file)
    gateways = [Gateway(h, f"{fleet_address(dict(p.settings), p.connection, h)}:{p.settings.gateway_metrics_port}")
                for h, p in plans.items() if p.is_gateway]
    if not gateways:
        exit_invalid(["the inventory has no gateway group: the Sparks' engine metrics are relayed by the gateways "
                      "(allowed: a fleet with a `gateway` group, docs/gateway.md)"])
    backends = plans[gateways[0].name].settings.gateway_backends
    serves = {h: plans[h].settings.serves or "" for h in backends}  # a gateway's backend always serves a profile
    relayed = [Relayed(server_name(h), serves[h], engine_of(profiles()[serves[h]]).name)
               for h, (_model, _address, _agent, *path) in backends.items() if path and path[0]]
    _write(scrape_config(gateways, relayed), out)


@cli.command("dashboard")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write it to this file instead of printing it.")
def dashboard(out: str | None) -> None:
    """The Grafana dashboard JSON (import it in Grafana; its data source is the Prometheus that scrapes the fleet)."""
    _write(resources.files("specfleet.gateway").joinpath("dashboards", DASHBOARD).read_text(encoding="utf-8"), out)
