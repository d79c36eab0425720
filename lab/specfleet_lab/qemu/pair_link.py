"""The lab's stand-in for a two-Spark pair's ConnectX-7 link: the pair's two guests get two more NICs
each, one per logical interface of the CX-7 port, on QEMU socket networks of their own (a UDP multicast group on
the controller's loopback per interface, as lan.py), so only the two guests share them.

The kernel names the NICs ethN (net.ifnames=0); the lab's preparation (`name_command`, run by `up`) writes a
systemd .link file per NIC, matched by its MAC, that names it like the Spark's interface (enp1s0f1np1,
enP2p1s0f1np1), and asks udev to apply it: the deploy finds the names a Spark has, from the guest itself, not from
a lab-only var. The files stay in the guest, so a reboot should name the NICs the same way (not yet tested). The
link has no address until the deploy's netplan gives it one, as on a Spark."""

from __future__ import annotations

import dataclasses
import shlex
import socket

GROUP = "230.0.0.2"  # administratively scoped (RFC 2365), on 127.0.0.1 only; lan.py uses 230.0.0.1
# a Spark's two logical interfaces of one CX-7 port (multi-spark.md); the lab imports no product code, so
# tests/lab/test_pair_link.py keeps this equal to the default pair_link_interfaces
IFNAMES = ("enp1s0f1np1", "enP2p1s0f1np1")
LINK_DIR = "/etc/systemd/network"


@dataclasses.dataclass(frozen=True)
class PairLink:
    ports: tuple[int, ...]  # one UDP port (multicast group) per logical interface

    def mac(self, side: int, iface: int) -> str:
        """A locally administered MAC per (side 0/1, interface): unique in a guest and on the link."""
        return f"52:54:00:c7:{iface:x}{side:x}:{self.ports[0] % 256:02x}"

    def qemu_args(self, side: int) -> list[str]:
        out: list[str] = []
        for i, port in enumerate(self.ports):
            out += ["-netdev", f"socket,id=cx{i},mcast={GROUP}:{port},localaddr=127.0.0.1",
                    "-device", f"virtio-net-pci,netdev=cx{i},mac={self.mac(side, i)}"]
        return out

    def link_files(self, side: int) -> dict[str, str]:
        return {f"{LINK_DIR}/10-specfleet-lab-{name}.link":
                f"[Match]\nMACAddress={self.mac(side, i)}\n\n[Link]\nName={name}\n"
                for i, name in enumerate(IFNAMES[:len(self.ports)])}

    def name_command(self, side: int) -> str:
        """The guest-side command (as root) that writes the .link files and has udev rename the NICs now."""
        writes = [f"printf %s {shlex.quote(text)} > {shlex.quote(path)}"
                  for path, text in self.link_files(side).items()]
        macs = " ".join(self.mac(side, i) for i in range(len(self.ports)))
        rename = ("udevadm control --reload && for d in /sys/class/net/*; do "
                  f"case \" {macs} \" in *\" $(cat $d/address) \"*) udevadm trigger --action=add \"$d\";; esac; done"
                  " && udevadm settle")
        check = " && ".join(f"test -e /sys/class/net/{name}" for name in IFNAMES[:len(self.ports)])
        return " && ".join([f"mkdir -p {LINK_DIR}", *writes, rename, check])

    def to_json(self) -> dict:
        return {"ports": list(self.ports)}

    @classmethod
    def from_json(cls, d: dict | None) -> PairLink | None:
        return cls(tuple(int(p) for p in d["ports"])) if d else None


def new_pair_link(interfaces: int = len(IFNAMES)) -> PairLink:
    """A link of its own: free UDP ports on the loopback, one per interface."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(interfaces)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return PairLink(tuple(s.getsockname()[1] for s in socks))
    finally:
        for s in socks:
            s.close()
