"""A two-Spark pair as files (pure): the link's netplan, the worker's authorized_keys entries for the head's two
keys and its sudoers rule for the gate, the head's known_hosts pinning the worker, and the `pair` section of a pair
host's release.json, rendered from a pair host's settings, and what the status read reports of them (pair_reads).
The paths are host/layout.py's; pair/steps/trust.py writes the trust, pair/steps/link.py applies the link.

The netplan follows NVIDIA's connect-two-sparks (2026-07-22): static addresses, one subnet per logical interface,
no DHCP. The MTU is left at the driver's default: NVIDIA's own netplan does not set one (a peer's jumbo frames are
a tuning, not the contract). Both head keys may log in from the head's link addresses only, without a terminal,
agent or forwarding (`restrict`), and each runs the pair's gate whatever the head asks (`command=`): the MPI key's
gate lets OpenMPI's launch through and nothing else; the switch key's (`--switch`) the head's switch of the pair and
nothing else. The MPI key is mounted into the head's serving container (mpirun's rsh agent uses it); the switch key
never is, so nothing running in a container can switch the worker."""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..fleet.settings import Settings
from ..host.layout import HOST_KEY_FILE, NETPLAN_FILE, PAIR_HOME, PAIR_USER, SUDOERS_FILE, Layout

# the pair key's public half as ssh-keygen prints it: type, key, an optional comment (dropped: ours replaces it)
PUBLIC_KEY = re.compile(r"^(ssh-ed25519 [A-Za-z0-9+/]{68})( [A-Za-z0-9@._-]{1,64})?$")
# an sshd host key as /etc/ssh/ssh_host_ed25519_key.pub holds it: type and key, and any comment (root@<any name>)
HOST_KEY = re.compile(r"^(ssh-ed25519 [A-Za-z0-9+/]{68})(\s.*)?$")
NETPLAN_HEADER = "# written by specfleet: the ConnectX-7 link of a two-Spark pair (removed by the cleanup deploy)\n"
SUDOERS_HEADER = "# written by specfleet: the pair MPI login may run the pair gate, nothing else (cleanup removes it)\n"
SUDOERS_WORD = re.compile(r"[A-Za-z0-9/._-]{1,200}")  # a word sudoers reads as itself (no escapes, no spaces)


class PairFileError(ValueError):
    """A value from a host that cannot go into a file (the deploy names the host and refuses)."""


def link_ip(address_with_prefix: str) -> str:
    """`192.168.100.10/24` -> `192.168.100.10`: the name SSH knows a link address by."""
    return address_with_prefix.split("/")[0]


def pair_group(s: Settings) -> str:
    """A pair host's pair_* group (`pair`, set on every host of a pair)."""
    if s.pair is None:
        raise ValueError(f"{s.host}: not a host of a pair")
    return s.pair


def pair_record(s: Settings, worker_release: str | None) -> dict[str, Any]:
    """The `pair` section of a pair host's release.json, what its host tool switches by (pair/host/pair_switch.py): the
    head's names the worker (link address, SSH port and login of the pair agent) and the worker's release; the
    head's release id covers all of it (its unit holds the address, port and login; plan.Rendered the release)."""
    if s.pair_role == "worker":  # its side of the switch prunes (no job of its own): keep_releases as the head's
        return {"role": "worker", "name": s.pair, "head": s.pair_peer, "keep_releases": s.keep_releases}
    assert s.pair_role == "head" and s.pair_peer_link_addresses and worker_release
    return {"role": "head", "name": s.pair,
            "worker": {"host": s.pair_peer, "address": link_ip(s.pair_peer_link_addresses[0]),
                       "port": s.pair_ssh_port, "login": PAIR_USER, "release": worker_release}}


def netplan(s: Settings) -> str:
    """The pair link's netplan file (root 0600, as netplan wants it): each link interface with its address."""
    ethernets = {ifname: {"dhcp4": False, "dhcp6": False, "addresses": [address]}
                 for ifname, address in zip(s.pair_link_interfaces, s.pair_link_addresses or [], strict=False)}
    return NETPLAN_HEADER + yaml.safe_dump({"network": {"version": 2, "ethernets": ethernets}}, sort_keys=False)


def authorized_keys(mpi_key: str, switch_key: str, head_link_addresses: list[str], lay: Layout, pair: str) -> str:
    """The worker's authorized_keys: the head's MPI key forced to the launch's gate, its switch key to the switch's."""
    return (authorized_key(mpi_key, head_link_addresses, gate_command(lay), pair)
            + authorized_key(switch_key, head_link_addresses, gate_command(lay, switch=True), f"{pair}-switch"))


def authorized_key(public_key: str, head_link_addresses: list[str], gate_command: str, pair: str) -> str:
    """The worker's authorized_keys line for one of the head's keys. `public_key` is read from the head: it must be
    one ed25519 key and nothing else (no options of its own, no second line)."""
    key = PUBLIC_KEY.match(public_key.strip())
    if not key:
        raise PairFileError("the pair's MPI public key is not one ssh-ed25519 key (ssh-keygen -t ed25519 prints one)")
    if '"' in gate_command or "\n" in gate_command:
        raise PairFileError("the pair gate's command may hold no double quote or newline")
    sources = ",".join(link_ip(a) for a in head_link_addresses)
    return f'restrict,from="{sources}",command="{gate_command}" {key.group(1)} specfleet-{pair}\n'


def gate_command(lay: Layout, switch: bool = False) -> str:
    """A head key's forced command on the worker: sudo, without a prompt, runs the pair gate as root (the MPI key's
    for the launch; `switch`: the switch key's)."""
    return " ".join(["sudo", "-n", *lay.pair_gate_argv(switch)])


def sudoers(lay: Layout) -> str:
    """The worker's sudoers drop-in (root 0440): PAIR_USER may run the gate with exactly its arguments, keeping
    $SSH_ORIGINAL_COMMAND (sudo resets the environment otherwise); the rest of sudo stays closed to it."""
    commands = [lay.pair_gate_argv(), lay.pair_gate_argv(switch=True)]
    bad = [w for argv in commands for w in argv if not SUDOERS_WORD.fullmatch(w)]
    if bad:
        raise PairFileError(f"{bad[0]!r} cannot go into a sudoers rule (letters, digits, / . _ - only)")
    return (SUDOERS_HEADER + f"Cmnd_Alias SPECFLEET_PAIR_GATE = {', '.join(' '.join(argv) for argv in commands)}\n"
            'Defaults!SPECFLEET_PAIR_GATE env_keep += "SSH_ORIGINAL_COMMAND"\n'
            f"{PAIR_USER} ALL=(root) NOPASSWD: SPECFLEET_PAIR_GATE\n")


def known_hosts(host_public_key: str, link_addresses: list[str], port: int = 22) -> str:
    """The head's known_hosts for the worker: the worker's ed25519 host key (read from the worker by the controller
    over its management connection) pinned at each of its link addresses, the names the launch connects to, in
    OpenSSH's `[address]:port` form when the worker's sshd is not on 22."""
    key = HOST_KEY.match(host_public_key.strip())
    if not key:
        raise PairFileError("the worker's SSH host key is not one ssh-ed25519 key (/etc/ssh/ssh_host_ed25519_key.pub)")
    names = [link_ip(a) if port == 22 else f"[{link_ip(a)}]:{port}" for a in link_addresses]
    return f"{','.join(names)} {key.group(1)}\n"


def pair_reads(s: Settings, lay: Layout) -> dict[str, tuple[str, ...]]:
    """What a pair host's one status read reports for its link and MPI trust: paths (kind, mode, owner, content
    hash), paths only stat'ed (the private key: kind, mode, owner, size; never opened), users (whether they exist),
    public key files (their line), and on the head the worker's link addresses to ping over each link interface
    (`IFNAME ADDRESS`)."""
    link = (NETPLAN_FILE, lay.netplan_staged, lay.pair_link_tool)
    if s.pair_role == "head":
        pings = tuple(f"{ifname} {link_ip(a)}" for ifname, a in zip(s.pair_link_interfaces,
                                                                     s.pair_peer_link_addresses, strict=True))
        return {"files": link + (lay.pair_dir, lay.pair_known_hosts, lay.pair_agent, lay.pair_switch_dir),
                "stats": (lay.pair_key, lay.pair_switch_key), "keys": (lay.pair_key_pub, lay.pair_switch_key_pub),
                "pings": pings}
    return {"files": link + (lay.pair_dir, PAIR_HOME, lay.pair_ssh_dir, lay.pair_authorized_keys, SUDOERS_FILE,
                             lay.sudoers_staged, lay.pair_gate, lay.pair_agent),
            "users": (PAIR_USER,), "keys": (HOST_KEY_FILE,)}


def public_key(line: str | None, host_key: bool = False) -> str | None:
    """An ssh-ed25519 public key line as the status read reported it, without its comment (None: not one). The
    pair's own key has specfleet's comment; a host key (`host_key`) any comment."""
    key = (HOST_KEY if host_key else PUBLIC_KEY).match((line or "").strip())
    return key.group(1) if key else None
