"""The lab's shared guest network: besides its own user-mode NAT (SSH from the controller, the Hub stand-in), every
guest has a second NIC on a QEMU socket network, a UDP multicast group on the controller's loopback, with a static
address: the guests of one network reach one another (a gateway guest its Sparks, later a two-Spark pair its peer).

Each network has its own multicast port, so fleets of one test run (the session fleet, the arm64 fleet) do not see
each other; a fleet that must join another's network (a gateway guest) is brought up with that network and its
own first host number.

In the guest, systemd-network-generator (enabled by the image) turns the kernel command line into a networkd file:
`ip=<address>:::<netmask>::eth1:off` gives the second NIC its static address. The kernel names it: with
net.ifnames=0 the NICs are eth0 (user-mode NAT, the first PCI NIC; DHCP by the image's 10-dhcp.network, which
matches eth0 only) and eth1 (this network). A rename (`ifname=`) would not do: its .link file is generated after
udev has named the NIC at boot. Nothing is written into the guest, so a guest keeps its address across a power-off
and boot (the same command line)."""

from __future__ import annotations

import dataclasses
import ipaddress
import socket

GROUP = "230.0.0.1"  # an administratively scoped IPv4 multicast group (RFC 2365), on 127.0.0.1 only
NETMASK = "255.255.255.0"
IFNAME = "eth1"  # the guest's name of its NIC on this network (the second PCI NIC, net.ifnames=0)


@dataclasses.dataclass(frozen=True)
class Lan:
    port: int  # UDP port of the multicast group: one per network
    subnet: str  # its /24, e.g. "10.88.7.0/24"

    def address(self, host: int) -> str:
        return str(ipaddress.ip_network(self.subnet)[host])

    def mac(self, host: int) -> str:
        """A locally administered MAC derived from the address (unique on the network)."""
        third, fourth = (int(x) for x in self.address(host).split(".")[2:])
        return f"52:54:00:88:{third:02x}:{fourth:02x}"

    def qemu_args(self, host: int) -> list[str]:
        return ["-netdev", f"socket,id=lan,mcast={GROUP}:{self.port},localaddr=127.0.0.1",
                "-device", f"virtio-net-pci,netdev=lan,mac={self.mac(host)}"]

    def kernel_args(self, host: int) -> str:
        return f"ip={self.address(host)}:::{NETMASK}::{IFNAME}:off"

    def to_json(self) -> dict:
        return {"port": self.port, "subnet": self.subnet}

    @classmethod
    def from_json(cls, d: dict | None) -> Lan | None:
        return cls(int(d["port"]), str(d["subnet"])) if d else None


def new_lan() -> Lan:
    """A network of its own: a free UDP port on the loopback, and a /24 derived from it (10.88.0.0/16)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return Lan(port, f"10.88.{port % 256}.0/24")
