"""The fleet's gateway group (pure): who is a gateway, who is a Spark behind it and what it serves, the addresses
they reach each other at, and the rules between hosts that only hold when the fleet has gateways.

A fleet without a `gateway` group gets none of these rules and no value from here.
With one, every other host (but hub_mirror hosts) is a Spark that must say which profile it `serves` (the gateway
routes by model) and be reachable at an IP address (`fleet_address`, else its ssh_hostname): the Sparks' filtering
sockets admit the gateways by address (systemd's IPAddressAllow= takes addresses, not names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engines.catalog import engine_of
from ..fleet.model import GATEWAY_GROUP, MIRROR_GROUP, Fleet, fleet_address, is_ipv4
from ..fleet.problems import Problem
from ..fleet.profiles import profiles
from ..serving.options import show

# vars every gateway must agree on: the gateways serve one config (two gateways behind DNS or a VIP are identical)
SHARED_GATEWAY_VARS = ("gateway_port", "gateway_bind", "gateway_metrics_port", "gateway_health_path",
                       "gateway_api_keys_file", "gateway_tls_cert_file", "gateway_tls_key_file", "gateway_timeout_sec",
                       "gateway_queue_timeout_sec", "gateway_check_inter_ms", "gateway_check_fall",
                       "gateway_check_rise", "gateway_server_maxconn", "drain_timeout_sec")
# the gateways' values every Spark behind them uses (its drain waits as they check), whatever the Spark's own vars say
SPARK_VARS_FROM_GATEWAYS = ("gateway_check_inter_ms", "drain_timeout_sec")
# (a, b): two ports that would collide on one host, per role
GATEWAY_PORT_PAIRS = (("gateway_metrics_port", "gateway_port"),)
SPARK_PORT_PAIRS = (("gateway_backend_port", "serve_port"), ("gateway_agent_port", "serve_port"),
                    ("gateway_agent_port", "gateway_backend_port"))


@dataclass(frozen=True)
class GatewayFleet:
    gateways: tuple[str, ...]  # the gateway hosts, in inventory order
    serves: dict[str, str]  # Spark -> the profile it serves, in inventory order
    addresses: dict[str, str]  # host (gateway or Spark) -> the IP address the other fleet hosts reach it at
    # what the Sparks take from the gateways (set on the gateway group): how often they check, how long a drain waits
    spark_vars: dict[str, Any]
    # what the gateways get: each Spark's [model, host:port of its filtering socket, agent port], in inventory order
    gateway_vars: dict[str, Any]


def host_profiles(fleet: Fleet, serves: dict[str, Any], profile_name: str | None) -> dict[str, str | None]:
    """The profile each host is built with in a run for `profile_name` (`serves`: each host's serves var, not yet
    checked): None on a gateway (it serves no model) and on a Spark whose `serves` names another profile (that run
    skips it: see `skips`)."""
    out: dict[str, str | None] = {}
    for host in fleet.hosts:
        other = profile_name is not None and serves[host] in profiles() and serves[host] != profile_name
        out[host] = None if host in fleet.gateways or other else profile_name
    return out


def skips(fleet: Fleet, serves: dict[str, str | None], profile_name: str | None) -> dict[str, str | None]:
    """Why a run for `profile_name` leaves each host of `serves` (its checked serves) alone (None: it does not)."""
    out: dict[str, str | None] = dict.fromkeys(serves)
    if profile_name is None:
        return out
    for host, profile in serves.items():
        if host in fleet.gateways:
            out[host] = f"a {GATEWAY_GROUP} host: deploys/gateway.py converges it"
        elif profile is not None and profile != profile_name:
            out[host] = f"serves {profile}: deploys/{profile}.py converges it"
    return out


def problems(fleet: Fleet, values: dict[str, dict[str, Any]]) -> list[Problem]:
    """The rules between hosts of a fleet with gateways (none without): `values` are each host's validated
    deploy vars (defaults applied)."""
    gateways = [h for h in fleet.gateways if h in values]
    if not gateways:
        return []
    out: list[Problem] = []
    for h in gateways:
        out += _gateway_problems(h, values[h], values[gateways[0]], gateways[0], h in fleet.mirrors)
    sparks = [h for h in fleet.sparks if h in values]
    if not sparks:
        out.append(Problem(gateways[0], GATEWAY_GROUP, "has no Spark to send requests to (allowed: a gateway group "
                                                       "with at least one host outside it serving a profile)"))
    for h in sparks:
        if values[h].get("serves") is None:
            out.append(Problem(h, "serves", f"not set; with a {GATEWAY_GROUP} group every Spark names the profile it "
                                            f"serves (allowed: {', '.join(profiles())})"))
        out += _port_problems(h, values[h], SPARK_PORT_PAIRS)
        if values[h].get("serve_host") != "127.0.0.1":
            out.append(Problem(h, "serve_host", f"{show(values[h].get('serve_host'))}: behind gateways trtllm-serve "
                                                "(no authentication) binds the loopback and the gateways reach it "
                                                "through the filtering socket (allowed: 127.0.0.1)"))
    for h in gateways + sparks:
        address = fleet_address(values[h], fleet.hosts[h].connection, h)
        if not is_ipv4(address):
            out.append(Problem(h, "fleet_address", f"{show(address)} is not an IPv4 address (with a {GATEWAY_GROUP} "
                                                   "group, hosts admit each other by address, on IPv4 sockets: set "
                                                   "fleet_address to the IPv4 address the other fleet hosts reach "
                                                   "this host at)"))
    return out


def _gateway_problems(h: str, own: dict[str, Any], first: dict[str, Any], first_name: str,
                      is_mirror: bool) -> list[Problem]:
    out = []
    if is_mirror:
        out.append(Problem(h, GATEWAY_GROUP, f"is also in {MIRROR_GROUP} (allowed: a host in one of "
                                             f"{GATEWAY_GROUP} and {MIRROR_GROUP}, not both)"))
    out += _port_problems(h, own, GATEWAY_PORT_PAIRS)
    cert, key = own.get("gateway_tls_cert_file"), own.get("gateway_tls_key_file")
    if (cert is None) != (key is None):
        out.append(Problem(h, "gateway_tls_key_file" if key is None else "gateway_tls_cert_file",
                           "is not set, but the other half of the TLS pair is "
                           "(allowed: both gateway_tls_cert_file and gateway_tls_key_file, or neither)"))
    for var in SHARED_GATEWAY_VARS:
        if own.get(var) != first.get(var):
            out.append(Problem(h, var, f"{show(own.get(var))} differs from {first_name}'s {show(first.get(var))} "
                                       "(allowed: the same value on every gateway: they serve one config)"))
    return out


def _port_problems(host: str, values: dict[str, Any], pairs: tuple[tuple[str, str], ...]) -> list[Problem]:
    return [Problem(host, a, f"{values[a]} is also {b} on this host (allowed: a port of its own)")
            for a, b in pairs if values.get(a) == values.get(b)]


def relayed_metrics_path(profile: dict[str, Any]) -> str:
    """The path of a Spark's engine metrics its gateways relay to Prometheus: only counters a read does not consume
    (a scrape of trtllm-serve's JSON iteration stats would take them from `status` and `bench`); "" for none."""
    counters = engine_of(profile).counters
    return counters.path if counters.scrapable else ""


def gateway_fleet(fleet: Fleet, values: dict[str, dict[str, Any]],
                  pair_workers: frozenset[str] = frozenset()) -> GatewayFleet | None:
    """The fleet's gateway roles, once `problems` found none; None without a gateway group. A pair's worker is no
    backend: its head is the pair's endpoint (pair/rules.py)."""
    gateways = list(fleet.gateways)
    if not gateways:
        return None
    sparks = [h for h in fleet.sparks if h not in pair_workers]
    addresses = {h: fleet_address(values[h], fleet.hosts[h].connection, h) for h in gateways + sparks}
    # model, the filtering socket, the agent's port, and the engine's metrics path the gateways relay ("": none, as
    # for an engine whose metrics a read consumes; gateway/render.py)
    backends = {h: [profiles()[values[h]["serves"]]["target"]["repo"],
                    f"{addresses[h]}:{values[h]['gateway_backend_port']}", values[h]["gateway_agent_port"],
                    relayed_metrics_path(profiles()[values[h]["serves"]])]
                for h in sparks}
    return GatewayFleet(tuple(gateways), {h: values[h]["serves"] for h in sparks}, addresses,
                        {"gateways": [addresses[g] for g in gateways],
                         **{k: values[gateways[0]][k] for k in SPARK_VARS_FROM_GATEWAYS}},
                        {"gateway_backends": backends})

