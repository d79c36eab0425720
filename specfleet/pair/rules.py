"""Two Sparks as one server (pure): the fleet's pair_<name> groups, each host's role and link addresses, and the
rules that make a pair well-formed. A fleet without a pair group gets none of these rules and no value from here.

A pair is the playbook's "Run on Two Sparks" (../shared/reference/multi-spark.md): the head runs the MPI launch and
is the pair's endpoint, the worker holds its side, and they reach each other over the ConnectX-7 link with one IPv4
subnet per logical interface (NVIDIA's connect-two-sparks guidance, which replaced the playbook's one shared subnet):
host 10 of each subnet is the head and host 11 the worker, unless pair_link_addresses says otherwise. What only the
hosts can tell (a link subnet that collides with a host's own networks, the link being up) is the preflight's."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from ..fleet.model import GATEWAY_GROUP, MIRROR_GROUP, PAIR_PREFIX, Fleet
from ..fleet.problems import Problem
from ..fleet.profiles import nodes, profiles
from ..serving.options import show

ROLES = ("head", "worker")
HOST_NUMBER = {"head": 10, "worker": 11}  # a role's address in each link subnet (connect-two-sparks: .10 and .11)
# what both hosts of a pair must agree on: they serve one model as one server, over one link
SHARED_PAIR_VARS = ("image", "profile_name", "serves", "serve_port", "service_name", "data_dir", "target_revision",
                    "draft_revision", "extra_llm_api_options", "container_env", "pair_link_subnets",
                    "pair_ssh_port")
HOST_CHECK_VARS = ("pair_link_interfaces", "pair_link_subnets", "pair_link_min_speed_mbps")  # host_problems reads


@dataclass(frozen=True)
class Pair:
    name: str  # its pair_* group
    head: str
    worker: str


def pair_profiles() -> list[str]:
    return [p for p in profiles() if nodes(p) > 1]


def link_addresses(v: dict[str, Any]) -> list[str]:
    """A pair host's address/prefix on each link interface: pair_link_addresses, else its role's host number in
    each of pair_link_subnets (checked by `problems` to exist)."""
    if v.get("pair_link_addresses") is not None:
        return list(v["pair_link_addresses"])
    nets = [ipaddress.IPv4Network(n) for n in v["pair_link_subnets"]]
    return [f"{net[HOST_NUMBER[v['pair_role']]]}/{net.prefixlen}" for net in nets]


def pairs(fleet: Fleet, values: dict[str, dict[str, Any]]) -> list[Pair]:
    """The fleet's pairs, once `problems` found none."""
    out = []
    for name, hosts in fleet.pairs.items():
        head, worker = sorted(hosts, key=lambda h: ROLES.index(values[h]["pair_role"]))
        out.append(Pair(name, head, worker))
    return out


def pair_vars(fleet_pairs: list[Pair], values: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What each pair host's settings get: its pair, its peer, both hosts' resolved link addresses."""
    out = {}
    for p in fleet_pairs:
        for h, peer in ((p.head, p.worker), (p.worker, p.head)):
            out[h] = {"pair": p.name, "pair_peer": peer, "pair_link_addresses": link_addresses(values[h]),
                      "pair_peer_link_addresses": link_addresses(values[peer])}
    return out


def problems(fleet: Fleet, values: dict[str, dict[str, Any]]) -> list[Problem]:
    """The rules of a fleet's pairs (none without a pair group): `values` are each host's validated deploy vars
    (defaults applied, its profile_name in this run)."""
    member_of: dict[str, list[str]] = {}
    for name, hosts in fleet.pairs.items():
        for h in hosts:
            member_of.setdefault(h, []).append(name)
    out: list[Problem] = []
    for h in (h for h in fleet.hosts if h in values):
        names, v = member_of.get(h, []), values[h]
        if len(names) > 1:
            out.append(Problem(h, names[1], f"{h} is also in {names[0]} (allowed: one pair per host)"))
        elif not names and v.get("pair_role") is not None:
            out.append(Problem(h, "pair_role", f"{v['pair_role']}, but {h} is in no {PAIR_PREFIX}* group (allowed: "
                                               "pair_role on the two hosts of a pair group)"))
        elif not names and nodes(v.get("profile_name")) > 1:
            out.append(Problem(h, "profile", f"{v['profile_name']} runs on two Sparks as one server; {h} is in no "
                                             f"{PAIR_PREFIX}* group (allowed: the two hosts of a pair group)"))
    if out:
        return out
    for name, hosts in fleet.pairs.items():
        out += _pair_problems(fleet, name, [h for h in hosts if h in values], values)
    return out


def _pair_problems(fleet: Fleet, name: str, hosts: list[str], values: dict[str, dict[str, Any]]) -> list[Problem]:
    if len(hosts) != 2:
        return [Problem(hosts[0] if hosts else name, name, f"has {len(hosts)} host(s){': ' if hosts else ''}"
                                                           f"{', '.join(hosts)} (allowed: exactly 2, a head and a "
                                                           "worker)")]
    out = [Problem(h, name, f"{h} is also in {g} (allowed: a pair's hosts are Sparks, in no {GATEWAY_GROUP} or "
                            f"{MIRROR_GROUP} group)")
           for h in hosts for g in (GATEWAY_GROUP, MIRROR_GROUP) if h in fleet.groups.get(g, ())]
    roles = {h: values[h].get("pair_role") for h in hosts}
    out += [Problem(h, "pair_role", f"not set (allowed: head or worker, one of each in {name})")
            for h in hosts if roles[h] is None]
    if None not in roles.values() and roles[hosts[0]] == roles[hosts[1]]:
        out.append(Problem(hosts[1], "pair_role", f"{roles[hosts[1]]} is also {hosts[0]}'s role in {name} "
                                                  "(allowed: one head and one worker)"))
    if out:
        return out
    head, worker = sorted(hosts, key=lambda h: ROLES.index(roles[h]))
    for h in hosts:
        profile = values[h].get("profile_name")
        if profile is not None and nodes(profile) == 1:
            out.append(Problem(h, "profile", f"{profile} runs on one Spark; {h} is half of {name} (allowed: a "
                                             f"two-Spark profile, {', '.join(pair_profiles())}; `serves` on the "
                                             "pair's hosts makes other profiles' deploys skip them)"))
    for var in SHARED_PAIR_VARS:
        if values[worker].get(var) != values[head].get(var):
            out.append(Problem(worker, var, f"{show(values[worker].get(var))} differs from {head}'s "
                                            f"{show(values[head].get(var))} (allowed: the same value on both hosts "
                                            f"of {name}: they serve as one)"))
    if out:
        return out
    for h in (head, worker):
        out += _link_problems(h, values[h], fleet.hosts[h].connection)
    if not out and link_addresses(values[head]) == link_addresses(values[worker]):
        out.append(Problem(worker, "pair_link_addresses", f"{show(link_addresses(values[worker]))} are also "
                                                          f"{head}'s (allowed: an address of its own on each link)"))
    return out


def _link_problems(h: str, v: dict[str, Any], connection: dict[str, Any]) -> list[Problem]:
    """One host's link: a subnet per interface, an address per subnet inside it, no subnet holding the address
    that SSH (or the fleet) reaches the host at."""
    ifaces, nets = v["pair_link_interfaces"], [ipaddress.IPv4Network(n) for n in v["pair_link_subnets"]]
    if len(nets) != len(ifaces):
        return [Problem(h, "pair_link_subnets", f"has {len(nets)} subnet(s) for {len(ifaces)} link interface(s) "
                                                "(allowed: one subnet per interface of pair_link_interfaces)")]
    out = []
    addresses = v.get("pair_link_addresses")
    if addresses is None:
        out += [Problem(h, "pair_link_addresses", f"not set, and {net} has no host {HOST_NUMBER[v['pair_role']]} "
                                                  "for its role (allowed: addresses in each subnet, or subnets of "
                                                  "/28 or larger)")
                for net in nets if net.num_addresses <= max(HOST_NUMBER.values()) + 1]
    elif len(addresses) != len(nets):
        out.append(Problem(h, "pair_link_addresses", f"has {len(addresses)} address(es) for {len(nets)} link "
                                                     "interface(s) (allowed: one per interface)"))
    else:
        out += [Problem(h, "pair_link_addresses", f"{a} is not in {net}, the subnet of {i} (allowed: an address of "
                                                  "the interface's subnet in pair_link_subnets)")
                for a, net, i in zip(addresses, nets, ifaces, strict=True) if ipaddress.IPv4Interface(a).network != net]
    for where in (connection.get("ssh_hostname"), v.get("fleet_address")):
        try:
            ip = ipaddress.ip_address(where) if where else None
        except ValueError:
            continue  # a name: only the host can say what it resolves to (the preflight)
        out += [Problem(h, "pair_link_subnets", f"{net} holds {ip}, the address {h} is managed at (allowed: link "
                                                "subnets apart from the management network)")
                for net in nets if ip is not None and ip in net]
    return out


def host_problems(v: dict[str, Any], interfaces: list[str], addresses: list[tuple[str, str]],
                  links: dict[str, tuple[str, int | None]]) -> list[str]:
    """What the preflight refuses on a pair host, from its status read (one clause each, `KEY: what (allowed)`):
    a link interface it does not have, one slower than pair_link_min_speed_mbps where the driver reports a speed
    (virtio reports none), and a link subnet that overlaps a network the host has on another interface (its
    management network, a docker bridge, a VPN): traffic for the peer would take the wrong way."""
    out = []
    for ifname in v["pair_link_interfaces"]:
        state, speed = links.get(ifname, ("missing", None))
        if state == "missing":
            out.append(f"pair_link_interfaces: {ifname} does not exist on this host (allowed: its interfaces, "
                       f"{', '.join(i for i in interfaces if i != 'lo') or 'none'})")
        elif speed is not None and speed < v["pair_link_min_speed_mbps"]:
            out.append(f"pair_link_min_speed_mbps: {ifname} runs at {speed} Mb/s (allowed: at least "
                       f"{v['pair_link_min_speed_mbps']}; check the cable and `ethtool {ifname}`)")
    for net in (ipaddress.IPv4Network(n) for n in v["pair_link_subnets"]):
        for ifname, cidr in addresses:
            if ifname not in v["pair_link_interfaces"] and ipaddress.IPv4Interface(cidr).network.overlaps(net):
                out.append(f"pair_link_subnets: {net} overlaps {cidr} on {ifname}, which is not a link interface "
                           "(allowed: link subnets no other network of the host uses)")
    return out
