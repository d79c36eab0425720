"""The pair part of a Spark's one status read (PAIR, `status.pair`): a pair host's interfaces, IPv4 addresses, link
states and speeds, and the head's pings across the link; and what the pair asks the shared file checks about (its link's
files, its MPI trust: pair_files.pair_reads). Its fragment is pair/host/pair_status.sh; fleet/status.py composes it into
the one read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..fleet.programs import program_text
from ..fleet.status import FileReads, Lines, StatusPart, register
from ..plan import HostPlan
from .render import pair_reads


@dataclass
class Pair:
    interfaces: list[str] = field(default_factory=list)  # the host's network interfaces
    addresses: list[tuple[str, str]] = field(default_factory=list)  # (interface, IPv4 address/prefix)
    # link interface -> (operstate or "missing", speed in Mb/s or None where the driver reports none)
    links: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    pings: dict[tuple[str, str], str] = field(default_factory=dict)  # (link interface, peer address) -> ok|fail|no-ping


def parse_pair(lines: Lines) -> Pair:
    st = Pair()
    for key, rest in lines:
        fields = (rest.split("\t") + ["", ""])[:3]
        if key == "ifaces":
            st.interfaces = rest.split()
        elif key == "addr":
            ifname, _, cidr = rest.partition("\t")
            st.addresses.append((ifname.split("@")[0], cidr))
        elif key == "link":
            ifname, state, speed = fields
            st.links[ifname] = (state, int(speed) if speed.isdigit() and int(speed) > 0 else None)
        elif key == "ping":
            st.pings[(fields[0], fields[1])] = fields[2]
    return st


def _env(plan: HostPlan) -> dict[str, str]:
    s = plan.settings
    pings = pair_reads(s, plan.paths).get("pings", ()) if s.pair else ()
    return {"LINKS": "\n".join(s.pair_link_interfaces) if s.pair else "", "PINGS": "\n".join(pings)}


def _reads(plan: HostPlan) -> FileReads:
    s = plan.settings
    if not s.pair:
        return FileReads()
    trust = pair_reads(s, plan.paths)
    return FileReads(files=trust.get("files", ()), users=trust.get("users", ()), keys=trust.get("keys", ()),
                     stats=trust.get("stats", ()))


PAIR = register(StatusPart(
    "pair", frozenset({"ifaces", "addr", "link", "ping"}), parse_pair,
    script=program_text("pair_status.sh"),
    env=_env, reads=_reads))
