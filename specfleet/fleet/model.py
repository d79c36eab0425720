"""The fleet, parsed once (pure): its hosts in file order, its groups, each host's connection and deploy vars, and
the roles the groups give (Hub mirror, gateway, Spark, pair member).

The fleet file (inventory.py reads it into an Inventory) is split here, once per host: what configures the connection
goes to pyinfra, the rest is the host's deploy vars (tunables.split_vars). Everything downstream reads this model, never
the raw inventory: the per-host settings (fleet/settings.py) and the rules between hosts (mirror/rules.py,
gateway/rules.py, pair/rules.py). The data flows one way: fleet file -> Fleet -> one Settings per host.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .inventory import Inventory
from .tunables import split_vars

MIRROR_GROUP = "hub_mirror"  # inventory group whose hosts run the fleet's Hub mirror (deploys/hub_mirror.py)
GATEWAY_GROUP = "gateway"  # inventory group whose hosts run the fleet's gateway (deploys/gateway.py)
PAIR_PREFIX = "pair_"  # an inventory group named pair_<name>: two Sparks serving one model together (TP=2)


@dataclass(frozen=True)
class FleetHost:
    """One host of the fleet file, split."""

    name: str
    connection: dict[str, Any]  # for pyinfra: ssh_*, _sudo..., Ansible's connection aliases renamed
    deploy: dict[str, Any]  # the deploy vars (merged by Ansible's precedence), for its settings
    # the vars set above the `all` level (by a group other than all, or for the host itself): what a fleet-derived
    # default (hub_endpoint -> the hub_mirror group's mirror) must not override
    explicit: frozenset[str]


@dataclass(frozen=True)
class Fleet:
    """The whole fleet file, split once; the roles are the groups' (a host's vars decide nothing here)."""

    path: Path | None  # the fleet file (its lock is next to it); None for a fleet built in memory
    hosts: dict[str, FleetHost]  # in file order (rollouts rely on it)
    groups: dict[str, tuple[str, ...]]  # group -> its hosts (all ancestors' included), as the inventory lists them
    mirrors: tuple[str, ...]  # the hub_mirror group's hosts, in file order
    gateways: tuple[str, ...]  # the gateway group's hosts, in file order
    sparks: tuple[str, ...]  # the hosts that serve a model: all but the gateways and the hub_mirror hosts
    mirror: str | None  # the hub_mirror group's first host: the mirror the other hosts use
    pairs: dict[str, tuple[str, ...]]  # each pair_<name> group -> its hosts (well-formed or not: pair_fleet's rules)


def read_fleet(inventory: Inventory, overrides: Mapping[str, Any] | None = None) -> Fleet:
    """The inventory split once per host. `overrides` (pyinfra's `--data key=value`) beat every inventory level: they
    are set on every host, explicitly."""
    extra = dict(overrides or {})
    hosts: dict[str, FleetHost] = {}
    for name in inventory.hosts:
        connection, deploy = split_vars({**inventory.host_vars[name], **extra})
        hosts[name] = FleetHost(name, connection, deploy, frozenset(inventory.explicit.get(name, ())) | set(extra))
    groups = {group: tuple(members) for group, members in inventory.groups.items()}
    mirrors = tuple(h for h in inventory.hosts if h in groups.get(MIRROR_GROUP, ()))
    gateways = tuple(h for h in inventory.hosts if h in groups.get(GATEWAY_GROUP, ()))
    return Fleet(
        path=inventory.path, hosts=hosts, groups=groups, mirrors=mirrors, gateways=gateways,
        mirror=mirrors[0] if mirrors else None,
        sparks=tuple(h for h in inventory.hosts if h not in mirrors and h not in gateways),
        pairs={group: members for group, members in groups.items() if group.startswith(PAIR_PREFIX)})


def fleet_address(deploy_vars: dict[str, Any], connection: dict[str, Any], name: str) -> str:
    """fleet_address, else the ssh_hostname, else the inventory name (then refused by `problems` if no IP)."""
    return str(deploy_vars.get("fleet_address") or connection.get("ssh_hostname") or name)


def is_ipv4(value: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(value), ipaddress.IPv4Address)
    except ValueError:
        return False
