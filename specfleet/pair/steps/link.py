"""A pair host's ConnectX-7 link: the netplan pair_files renders, written as its own file and
applied by the host's pair-link (netplan try: it reverts by itself unless the controller comes back over SSH and
confirms), then checked across the link from the head. What is already in place is only read: the netplan file
as rendered and every link address up is nothing to do.

The link is applied in ONE operation called from one place for both hosts (as the key exchange in pair/steps/trust.py):
in a CLI run both apply at once, and the head pings the worker's link addresses once the worker's side is done.
The preflight (link_problems) refuses a configured link that is down or does not answer, before anything changes."""

from __future__ import annotations

import shlex
from collections import defaultdict
from dataclasses import dataclass
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import files, python, server

from ...fleet.status import HostStatus, Want, sha256
from ...fleet.steps.coordination import SharedOperation, Slot
from ...fleet.steps.jobs import run_on_host
from ...fleet.steps.state import current_plan, host_status, pair_peer
from ...host.layout import NETPLAN_FILE
from ...plan import HostPlan
from ..render import link_ip, netplan, pair_group
from .trust import program

# pair -> its link operation: the hosts that added it, and whether each applied its side
_LINKS: Slot[defaultdict[str, SharedOperation[bool]]] = Slot("pair links", lambda: defaultdict(SharedOperation))


def _addresses(plan: HostPlan) -> list[tuple[str, str]]:
    s = plan.settings
    return list(zip(s.pair_link_interfaces, s.pair_link_addresses or [], strict=False))


def configured(plan: HostPlan, st: HostStatus) -> bool:
    """Whether the host's netplan file for the link is the one this plan renders (root 0600)."""
    return Want("file", "600", sha256=sha256(netplan(plan.settings))).matches(st.files.found.get(NETPLAN_FILE))


def link_ready(plan: HostPlan, st: HostStatus) -> bool:
    """Nothing to apply: the file as rendered and every link interface holding its address."""
    return configured(plan, st) and all(pair in st.pair.addresses for pair in _addresses(plan))


def link_problems(plan: HostPlan, st: HostStatus, peer_plan: HostPlan, peer_st: HostStatus) -> list[str]:
    """The preflight's refusals of a configured link (one `KEY: what (allowed)` clause each): a link interface that
    is not up, and on the head a worker address that does not answer a ping over its interface, when both ends are
    in place (file and addresses; a ping from a head without its addresses, or to a worker without its, says
    nothing). A link not yet in place at either end is the link step's to apply and check."""
    s = plan.settings
    if not configured(plan, st):
        return []
    both = link_ready(plan, st) and link_ready(peer_plan, peer_st)
    links = st.pair.links
    out = [f"pair_link_interfaces: {ifname} is {links[ifname][0]} (allowed: up at both ends; check the cable and "
           f"`ip link show {ifname}`)" for ifname in s.pair_link_interfaces
           if links.get(ifname, ("missing", None))[0] not in ("up", "missing")]
    for (ifname, address), result in st.pair.pings.items():
        if result != "ok" and not out and both:
            out.append(f"pair_link_addresses: {address} ({s.pair_peer}) does not answer a ping over {ifname}"
                       + (" (ping is not installed: apt install iputils-ping)" if result == "no-ping" else
                          f" (allowed: a link that answers at both ends; check `ip addr show {ifname}` on "
                          f"{s.pair_peer})"))
    return out


@dataclass
class LinkWork:
    """What the link needs on one pair host, decided from its status read (`specfleet plan` lists the same)."""

    pair_dir: str | None = None  # the pair directory to create (root only)
    tool: str | None = None  # pair-link to install (its content)
    staged: str | None = None  # the netplan to stage (its content)
    apply: bool = False  # netplan try, confirm, ping across

    def lines(self, plan: HostPlan) -> list[str]:
        lay = plan.paths
        out = [f"create {self.pair_dir}"] if self.pair_dir else []
        out += [f"write {lay.pair_link_tool}"] if self.tool is not None else []
        out += [f"write {lay.netplan_staged}"] if self.staged is not None else []
        if self.apply:
            out.append(f"apply the pair link on {', '.join(plan.settings.pair_link_interfaces)} (netplan try, "
                       f"confirmed over SSH; {NETPLAN_FILE})")
        return out


def link_work(plan: HostPlan) -> LinkWork | None:
    """None: not a pair host, or its pair is not in this run (which the preflight refuses)."""
    if not plan.settings.pair or pair_peer(plan) is None:
        return None
    lay, st, w = plan.paths, host_status(plan), LinkWork()
    w.pair_dir = None if Want("dir", "700").matches(st.files.found.get(lay.pair_dir)) else lay.pair_dir
    tool, text = program("pair_link.py"), netplan(plan.settings)
    w.tool = None if Want("file", "755", sha256=sha256(tool)).matches(st.files.found.get(lay.pair_link_tool)) else tool
    w.apply = not link_ready(plan, st)
    stale = not Want("file", "600", sha256=sha256(text)).matches(st.files.found.get(lay.netplan_staged))
    w.staged = text if w.apply and stale else None
    return w


@deploy("Pair link")
def pair_link() -> None:
    plan = current_plan()
    w = link_work(plan)
    if w is None:
        return
    s, lay = plan.settings, plan.paths
    if w.pair_dir:
        files.directory(name="The pair's directory (root only)", path=w.pair_dir, user="root", group="root",
                        mode="700")
    if w.tool is not None:
        files.put(name="Install pair-link (netplan try, confirmed over SSH)", src=StringIO(w.tool),
                  dest=lay.pair_link_tool, user="root", group="root", mode="755")
    if w.staged is not None:
        files.put(name="Stage the pair link's netplan", src=StringIO(w.staged), dest=lay.netplan_staged,
                  user="root", group="root", mode="600")
    if w.apply:
        python.call(name=f"Pair link: apply {s.pair}'s netplan with netplan try, confirm it over SSH, ping across",
                    function=_apply)
        _LINKS()[pair_group(s)].added(host)


def _run(state, host, argv: list[str], what: str) -> bool:
    ok, out, err = run_on_host(state, host, shlex.join(argv))
    line = (err or out or ["no output"])[-1]
    (logger.info if ok else logger.error)(f"{host.print_prefix}{what}: {line}")
    return ok


def _apply(state, host) -> bool:
    plan = host.data.get("specfleet")
    s, lay = plan.settings, plan.paths
    links = _LINKS(state)[s.pair]
    addrs = _addresses(plan)
    logger.info(f"{host.print_prefix}pair link: netplan try on {', '.join(i for i, _ in addrs)} (about 15 s; "
                f"reverted unless confirmed within {s.pair_link_confirm_sec} s)")
    ok = False
    try:  # the outcome is published whatever happens: the head waits for it
        ok = _run(state, host, lay.pair_link_argv("apply", "--interfaces", ",".join(i for i, _ in addrs),
                                                  "--addresses", ",".join(a for _, a in addrs), "--confirm-sec",
                                                  str(s.pair_link_confirm_sec)), "pair link apply")
        ok = ok and _run(state, host, lay.pair_link_argv("confirm"), "pair link confirm")  # this controller is back
    finally:
        links.publish(host, ok)
    if not ok or s.pair_role != "head":
        return ok
    worker = next((h for h in links.hosts(state) if h is not host), None)
    if worker is not None:  # the worker applies too: wait for its side (pair-link waits START_SEC + VERIFY_SEC at most)
        why = links.wait(state, host, worker, s.pair_link_confirm_sec + 120)
        if why == "elsewhere":
            logger.warning(f"{host.print_prefix}pair link: {s.pair_peer} applies its side in another operation "
                           "(pyinfra's Python API, or --serial); the next converge's preflight pings across it")
            return True
        if not links.results.get(worker.name):
            said = {"done": "its apply failed", "failed": "it failed", "timeout": "not in time"}[why]
            logger.error(f"{host.print_prefix}pair link: {s.pair_peer}'s side of the link is not applied ({said}); "
                         "not checked")
            return False
    for ifname, address in zip(s.pair_link_interfaces, s.pair_peer_link_addresses, strict=True):
        peer = link_ip(address)
        if not _run(state, host, ["ping", "-n", "-q", "-c", "3", "-W", "2", "-I", ifname, peer],
                    f"ping {peer} ({s.pair_peer}) over {ifname}"):
            return False
    return True


def remove_pair_link(plan: HostPlan) -> None:
    """Cleanup (after the MPI trust): the link's netplan file (then `netplan generate`, so networkd's generated files
    in /run no longer hold the link either: a reload or carrier change cannot bring it back) and its addresses on
    the link interfaces only (not `netplan apply`, which would renew every interface networkd manages, the
    management one included), pair-link, and the pair directory with the link's state."""
    s, lay, st = plan.settings, plan.paths, host_status(plan)
    if not s.pair:
        return
    steps = [f"rm -f {shlex.quote(p)}" for p in (NETPLAN_FILE, lay.pair_link_tool) if p in st.files.found]
    if NETPLAN_FILE in st.files.found:  # rewrite netplan's generated networkd files without the link (applies nothing)
        steps.append("{ ! command -v netplan >/dev/null || netplan generate; }")
    # an address already gone is what cleanup wants: `ip` says so, and the cleanup goes on
    steps += [f"{{ ip addr del {shlex.quote(a)} dev {shlex.quote(i)} || true; }}" for i, a in _addresses(plan)
              if (i, a) in st.pair.addresses]
    steps += [f"rm -rf {shlex.quote(lay.pair_dir)}"] if lay.pair_dir in st.files.found else []
    if steps:
        server.shell(name=f"Remove the pair link ({NETPLAN_FILE}, the link addresses, {lay.pair_dir})",
                     commands=[" && ".join(steps)])
