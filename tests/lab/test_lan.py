"""The lab's shared guest network (lab/specfleet_lab/lan.py): what each guest's QEMU command line and kernel command
line carry, that a fleet joining another's network gets addresses of its own, that the state survives a reload,
and that the inventory names each guest's address. (Booted for real by the gateway VM tests.)"""

from __future__ import annotations

import json
import shutil
import socket
import struct
from pathlib import Path

import yaml

from specfleet_lab import write_inventory
from specfleet_lab.qemu.guest import QemuHost, qemu_argv
from specfleet_lab.qemu.lan import GROUP, Lan, new_lan


def _guest(tmp_path: Path, lan: Lan | None, host: int, name: str = "spark-1") -> QemuHost:
    return QemuHost(name=name, ssh_port=2222, overlay=tmp_path / f"{name}.qcow2", pidfile=tmp_path / f"{name}.pid",
                 console_log=tmp_path / f"{name}.log", key_path=tmp_path / "id", argv=[], lan=lan, lan_host=host)


def test_each_guest_gets_a_second_nic_on_the_multicast_network_and_its_address_on_the_kernel_line(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    lan = Lan(40123, "10.88.7.0/24")
    argv = qemu_argv(_guest(tmp_path, lan, 11), Path("/k"), Path("/i"), 2048, 1, "tcg", "spark-1")
    assert f"socket,id=lan,mcast={GROUP}:40123,localaddr=127.0.0.1" in argv
    assert "virtio-net-pci,netdev=lan,mac=52:54:00:88:07:0b" in argv
    assert "virtio-net-pci,netdev=n0" in argv  # the NAT NIC stays: SSH, the Hub stand-in
    append = argv[argv.index("-append") + 1]
    assert append.endswith(" ip=10.88.7.11:::255.255.255.0::eth1:off")
    plain = qemu_argv(_guest(tmp_path, None, 0), Path("/k"), Path("/i"), 2048, 1, "tcg", "spark-1")
    assert not [a for a in plain if "mcast" in a or " ip=" in a]


def test_a_joining_fleet_has_addresses_and_macs_of_its_own():
    lan = new_lan()
    ours = {lan.address(h) for h in (11, 12, 13)}
    theirs = {lan.address(h) for h in (21,)}
    assert not ours & theirs and len({lan.mac(h) for h in (11, 12, 13, 21)}) == 4
    assert lan.subnet.startswith("10.88.") and lan.subnet.endswith(".0/24")


def test_the_network_is_kept_in_the_fleet_state_and_the_inventory(tmp_path):
    lan = Lan(40124, "10.88.8.0/24")
    g = _guest(tmp_path, lan, 12, "spark-2")
    again = QemuHost.from_json(json.loads(json.dumps(g.to_json())))
    assert again.lan == lan and again.lan_address == "10.88.8.12"
    inv = tmp_path / "inventory.yml"
    write_inventory(inv, [g], tmp_path / "id")
    host = yaml.safe_load(inv.read_text())["all"]["children"]["vm_fleet"]["hosts"]["spark-2"]
    assert host["fleet_address"] == "10.88.8.12"
    old = {k: v for k, v in g.to_json().items() if k not in ("lan", "lan_host")}  # a fleet.json from before
    assert QemuHost.from_json(old).lan is None


def test_multicast_on_the_loopback_reaches_a_second_member():
    """What QEMU's socket netdev relies on, on this controller: a datagram to the group, sent from 127.0.0.1,
    reaches another socket that joined the group on 127.0.0.1."""
    lan = new_lan()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx.bind((GROUP, lan.port))
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                  struct.pack("4s4s", socket.inet_aton(GROUP), socket.inet_aton("127.0.0.1")))
    rx.settimeout(5)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    tx.sendto(b"frame", (GROUP, lan.port))
    assert rx.recv(64) == b"frame"
    rx.close()
    tx.close()


def test_the_lab_command_puts_a_fleet_on_its_own_network_only_when_asked(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import specfleet_lab.cli as cli

    seen = []

    def fake_up(**kw):
        seen.append(kw["lan"])
        lan = new_lan() if kw["lan"] else None
        guests = [_guest(tmp_path, lan, 11)]
        return type("F", (), {"guests": guests, "inventory_path": tmp_path / "inventory.yml"})()

    monkeypatch.setattr(cli, "up", fake_up)
    plain = CliRunner().invoke(cli.main, ["up", "--count", "1", "--workdir", str(tmp_path)])
    on_lan = CliRunner().invoke(cli.main, ["up", "--count", "1", "--workdir", str(tmp_path), "--lan"])
    assert plain.exit_code == 0 and on_lan.exit_code == 0, plain.output + on_lan.output
    assert seen == [False, True]
    assert "\t10.88." not in plain.output and "\t10.88." in on_lan.output.splitlines()[0] and \
        on_lan.output.splitlines()[0].endswith(".11"), on_lan.output
