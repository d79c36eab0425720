"""The fleet's topology: the hub_mirror group and where the other hosts reach its mirror (their hub_endpoint), and
the names of the groups that make two Sparks one server (pair_fleet.py)."""

from __future__ import annotations

from typing import Any

from .inventory import Inventory
from .tunables import split_vars

MIRROR_GROUP = "hub_mirror"  # inventory group whose hosts run the fleet's Hub mirror (deploys/hub_mirror.py)
PAIR_PREFIX = "pair_"  # an inventory group named pair_<name>: two Sparks serving one model together (TP=2)


def pair_groups(groups: dict[str, list[str]]) -> dict[str, list[str]]:
    """The pair groups of an inventory's groups (name -> its hosts, in inventory order)."""
    return {name: hosts for name, hosts in groups.items() if name.startswith(PAIR_PREFIX)}


def mirror_url(mirror_vars: dict[str, Any], connection: dict[str, Any], name: str) -> str:
    """http://<address>:<port> at which the fleet hosts reach a mirror host (its merged vars and connection data)."""
    address = mirror_vars.get("mirror_address") or connection.get("ssh_hostname") or name
    address = f"[{address}]" if ":" in str(address) else address
    return f"http://{address}:{mirror_vars.get('mirror_port')}"


def mirror_endpoints(inventory: Inventory, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """With a hub_mirror group: the vars of every other host whose hub_endpoint is not set above the `all` level,
    pointed at the (first) mirror; the controller keeps asking the upstream Hub (controller_hub_endpoint).
    Validation of the result happens with everything else (an unusable address is one line)."""
    mirrors = inventory.groups.get(MIRROR_GROUP) or []
    if not mirrors:
        return {}
    connection, mirror_vars = split_vars(inventory.host_vars[mirrors[0]])
    url = mirror_url({**defaults, **mirror_vars}, connection, mirrors[0])
    out: dict[str, dict[str, Any]] = {}
    for host in inventory.hosts:
        if host in mirrors or "hub_endpoint" in inventory.explicit.get(host, ()):
            continue
        own = inventory.host_vars[host]
        upstream = own.get("hub_endpoint", defaults.get("hub_endpoint"))
        controller = own.get("controller_hub_endpoint", defaults.get("controller_hub_endpoint")) or upstream
        out[host] = {**own, "hub_endpoint": url, "controller_hub_endpoint": controller}
    return out
