"""The fleet's mirror host topology (pure): where the other hosts reach the hub_mirror group's Hub mirror (their
hub_endpoint), and its image registry: who pulls through it, at which address, the rules between hosts it adds, and
its storage budget against the lock's image sizes."""

from __future__ import annotations

from typing import Any

from ..fleet.model import MIRROR_GROUP, Fleet, fleet_address, is_ipv4
from ..fleet.problems import Problem
from ..serving.options import show


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


# ---- the image registry on the mirror host --------------------------------------------------------------------
# (a, b): ports of the mirror host that would collide (the Hub mirror's and the registry's, each a socket + engine)
MIRROR_PORT_PAIRS = (("image_registry_port", "mirror_port"), ("image_registry_port", "mirror_engine_port"),
                     ("image_registry_port", "image_registry_engine_port"),
                     ("image_registry_engine_port", "mirror_port"),
                     ("image_registry_engine_port", "mirror_engine_port"))


def image_clients(fleet: Fleet, values: dict[str, dict[str, Any]]) -> list[str]:
    """The Sparks that pull their image through the mirror's registry (image_mirror on), in file order."""
    return [h for h in fleet.sparks if h in values and values[h].get("image_mirror") is True]


def image_problems(fleet: Fleet, values: dict[str, dict[str, Any]]) -> list[Problem]:
    """The rules between hosts of a fleet with image_mirror on anywhere (none otherwise): `values` are each host's
    validated deploy vars (defaults applied). The registry's socket admits its clients by address (systemd's
    IPAddressAllow= takes addresses, not names), so every host involved needs an IPv4 fleet address."""
    clients = image_clients(fleet, values)
    mirror = fleet.mirror
    out: list[Problem] = []
    if clients and mirror is None:
        return [Problem(h, "image_mirror", f"true, but the fleet has no {MIRROR_GROUP} group "
                                           f"(allowed: false, or a {MIRROR_GROUP} group whose host runs the registry)")
                for h in clients]
    if mirror is None or mirror not in values:
        return []
    own = values[mirror]
    if clients and own.get("image_mirror") is not True:
        out += [Problem(h, "image_mirror", f"true, but {mirror} (the {MIRROR_GROUP} host) runs no image registry: "
                                           "its image_mirror is false (allowed: image_mirror true on both)")
                for h in clients]
    if own.get("image_mirror") is not True:
        return out
    out += [Problem(mirror, a, f"{own.get(a)} is also {b} on this host (allowed: a port of its own)")
            for a, b in MIRROR_PORT_PAIRS if own.get(a) == own.get(b)]
    for h in [mirror, *clients]:
        address = fleet_address(values[h], fleet.hosts[h].connection, h)
        if not is_ipv4(address):
            out.append(Problem(h, "fleet_address", f"{show(address)} is not an IPv4 address (with image_mirror the "
                                                   "registry binds the mirror's fleet address and admits the Sparks "
                                                   "by theirs: set fleet_address to this host's IPv4 address)"))
    return out


def image_registry_vars(fleet: Fleet, values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Once `image_problems` found none: per host, the derived settings of the registry. The mirror host gets the
    address its socket binds (`image_registry`) and the Sparks it admits (`image_clients`); each client Spark gets
    the registry it pulls from (`image_registry`, host:port)."""
    mirror = fleet.mirror
    if mirror is None or mirror not in values or values[mirror].get("image_mirror") is not True:
        return {}
    at = f"{fleet_address(values[mirror], fleet.hosts[mirror].connection, mirror)}:" \
         f"{values[mirror]['image_registry_port']}"
    clients = image_clients(fleet, values)
    addresses = [fleet_address(values[h], fleet.hosts[h].connection, h) for h in clients]
    return {mirror: {"image_registry": at, "image_clients": addresses},
            **{h: {"image_registry": at} for h in clients}}


def budget_problem(host: str, budget_gb: int, images: dict[str, dict[str, dict[str, Any]] | None],
                   lock_name: str) -> str | None:
    """The registry's budget against the locked images its Sparks pull through it (`images`: reference -> the lock's
    platform table, or None where the lock records no sizes). Each image counts its largest platform (the mirror
    fetches only its Sparks' platforms; the controller does not know their architecture before it reads them).
    A line that is a problem (`HOST: KEY: ...`), or a note when no size is known; None when it fits."""
    sized = {ref: max(p["bytes"] for p in table.values()) for ref, table in images.items() if table}
    if len(sized) < len(images):
        unknown = sorted(ref for ref, table in images.items() if not table)
        return (f"note: {host}: image_store_budget_gb: not checked: {lock_name} records no size for "
                f"{', '.join(unknown)} (run: specfleet lock inventory.py)")
    need = sum(sized.values())
    if need <= budget_gb * 1e9:
        return None
    what = ", ".join(f"{ref} {size / 1e9:.2f} GB" for ref, size in sorted(sized.items()))
    return str(Problem(host, "image_store_budget_gb",
                       f"{budget_gb} GB is below the {need / 1e9:.2f} GB of the images the Sparks pull through the "
                       f"mirror ({what}, in {lock_name}) (allowed: at least {-(-need // 10**9)})"))


def store_repository(name: str) -> str:
    """The repository in the mirror's store of an upstream image name (registry/path, no tag or digest): the
    registry host is its first component, so two upstreams never collide; a port's ':' becomes '_' (a repository
    path component allows no ':')."""
    registry, _, path = name.partition("/")
    return f"{registry.replace(':', '_')}/{path}"
