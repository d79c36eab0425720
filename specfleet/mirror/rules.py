"""The fleet's Hub mirror topology: where the other hosts reach the hub_mirror group's mirror (their hub_endpoint)."""

from __future__ import annotations

from typing import Any

from ..fleet.model import Fleet


def mirror_url(mirror_vars: dict[str, Any], connection: dict[str, Any], name: str) -> str:
    """http://<address>:<port> at which the fleet hosts reach a mirror host (its merged vars and connection data)."""
    address = mirror_vars.get("mirror_address") or connection.get("ssh_hostname") or name
    address = f"[{address}]" if ":" in str(address) else address
    return f"http://{address}:{mirror_vars.get('mirror_port')}"


def mirror_endpoints(fleet: Fleet, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """With a hub_mirror group: the deploy vars of every other host whose hub_endpoint is not set above the `all`
    level, pointed at the (first) mirror; the controller keeps asking the upstream Hub (controller_hub_endpoint).
    Validation of the result happens with everything else (an unusable address is one line)."""
    if fleet.mirror is None:
        return {}
    mirror = fleet.hosts[fleet.mirror]
    url = mirror_url({**defaults, **mirror.deploy}, mirror.connection, mirror.name)
    out: dict[str, dict[str, Any]] = {}
    for host in fleet.hosts.values():
        if host.name in fleet.mirrors or "hub_endpoint" in host.explicit:
            continue
        own = host.deploy
        upstream = own.get("hub_endpoint", defaults.get("hub_endpoint"))
        controller = own.get("controller_hub_endpoint", defaults.get("controller_hub_endpoint")) or upstream
        out[host.name] = {**own, "hub_endpoint": url, "controller_hub_endpoint": controller}
    return out
