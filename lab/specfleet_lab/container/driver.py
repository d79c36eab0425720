"""The container driver: each host a systemd container (host.py) on the lab's own engine (engine.py), from the
container output of the same image recipe as the QEMU disk. Hosts start in a second or two; what a container cannot
show (docs/dev/lab.md, the fidelity ledger) runs on the QEMU driver.

Networks, all on the engine's address pool but the pair link: a management network per engine (eth0: the
controller at its gateway, SSH to each host's fixed address), a shared network per fleet that asks for one (eth1: a
gateway and its Sparks), and a pair's CX-7 link, one internal bridge per logical interface without an address on
the machine (the bridge driver's `com.docker.network.bridge.inhibit_ipv4`, which leaves the bridge without the
gateway address: moby/moby#40579, documented in docs.docker.com's bridge driver options since docker/docs#19833; so
NVIDIA's subnets route nowhere on it, whichever run uses them), with the pair's own addresses (NVIDIA's .10 and
.11); the hosts' ifnames unit names those interfaces like a Spark's at every boot."""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import secrets
import subprocess
from pathlib import Path

from ..arch import host_arch
from ..drivers import Driver
from ..local import lab_root
from ..recipe import DISK_SIZE
from . import flags
from .engine import LABEL, Engine, mkfs_data_disk
from .host import ContainerHost, mount_data_disk
from .slots import BASE

log = logging.getLogger(__name__)

FLEET_LABEL = "specfleet-lab.fleet"
# docker numbers a container's interfaces in the order of its networks' names: the management network is eth0 (its
# default route), a shared network eth1, a pair's link the next two (renamed at boot)
MGMT = "lab-0-mgmt"
LINK_IFNAMES = ("enp1s0f1np1", "enP2p1s0f1np1")  # a Spark's; tests/unit keeps them equal to pair_link_interfaces
LINK_SUBNETS = ("192.168.100.0/24", "192.168.101.0/24")  # the defaults of pair_link_subnets (NVIDIA's)
LINK_HOSTS = (10, 11)  # the head's and the worker's address on each (the defaults of pair_link_addresses)


class ContainerDriver(Driver):
    name = "container"

    def __init__(self, root: Path, owner: str):
        self.engine = Engine(root)
        self.owner = owner  # "session:<pid>:<start>" (the harness closes it) or "fleet:<workdir>" (its `down` does)

    @classmethod
    def create_for(cls, workdir=None, owner: str | None = None) -> ContainerDriver:
        root = lab_root() / "runs" / f"r{os.getpid()}-{secrets.token_hex(3)}"
        return cls(root, owner or f"fleet:{Path(workdir or '.vm').absolute()}")

    @classmethod
    def from_json(cls, d: dict) -> ContainerDriver:
        return cls(Path(d["root"]), d["owner"])

    def to_json(self) -> dict:
        return {"name": self.name, "root": str(self.engine.root), "owner": self.owner}

    def why_not(self, arches: list) -> str | None:
        return flags.why_not(arches, host_arch())

    # -- the engine, started on first use
    def _ensure(self) -> None:
        if self.engine.alive():
            return
        sweep()
        self.engine.start(self.owner)
        net = self._subnet(0)
        self.engine.network_create(MGMT, "--subnet", str(net), "--gateway", str(net[1]))

    def _subnet(self, index: int) -> ipaddress.IPv4Network:
        """The run's index-th /24: its slot's first is the management network."""
        return list(BASE.subnets(new_prefix=24))[self.engine.slot * 16 + index]

    def _counter(self, name: str, first: int) -> int:
        f = self.engine.root / f"{name}.next"
        n = int(f.read_text()) if f.exists() else first
        f.write_text(f"{n + 1}\n")
        return n

    @property
    def controller_address(self) -> str:
        self._ensure()
        return str(self._subnet(0)[1])

    @property
    def bind_address(self) -> str:
        return self.controller_address

    def new_network(self) -> dict:
        self._ensure()
        subnet = self._subnet(self._counter("networks", 1))
        name = f"lab-1-{subnet.network_address}".replace(".", "-")
        self.engine.network_create(name, "--subnet", str(subnet), "--gateway", str(subnet[1]))
        return {"name": name, "subnet": str(subnet)}

    def host_from_json(self, d: dict) -> ContainerHost:
        return ContainerHost.from_json(d)

    def leftovers(self, workdir: Path) -> list[str]:
        """The fleet's containers and volumes on the engine, its hosts' data disks and their mounts; with the engine
        the fleet owned: the engine's processes, directory and cgroups."""
        left = []
        if self.engine.alive():
            for kind, listing in (("container", ("ps", "-aq")), ("volume", ("volume", "ls", "-q")),
                                  ("network", ("network", "ls", "-q"))):
                found = self.engine.docker(*listing, "--filter", f"label={FLEET_LABEL}={workdir}", check=False)
                left += [f"{kind} {i.decode()}" for i in found.stdout.split()]
        mounts = Path("/proc/self/mountinfo").read_text()
        for d in (self.engine.root / "mnt", self.engine.root / "disks"):
            left += [f"{p}" + (" (mounted)" if f" {p} " in mounts else "") for p in sorted(d.glob("*"))
                     if p.name.startswith(_tag(workdir))] if d.is_dir() else []
        if self.owner == f"fleet:{workdir}":
            left += self.engine.leftovers()
        return left

    # -- a fleet's hosts
    def create(self, b) -> None:
        self._ensure()
        b.timings.update(count=len(b.arches), memory_mb=b.memory_mb, arches=list(b.arches))
        tag = _tag(b.workdir)
        links = self._pair_link(tag, str(b.workdir)) if b.pair_link else []
        for i, arch in enumerate(b.arches, start=1):
            name = f"spark-{i}"
            h = ContainerHost(name=name, key_path=b.images[arch].key, arch=arch, container=f"{tag}-{name}",
                              engine_root=self.engine.root, ssh_host=str(self._subnet(0)[self._counter("mgmt", 11)]),
                              data_disk=self.engine.root / "disks" / f"{tag}-{name}.img",
                              data_mount=self.engine.root / "mnt" / f"{tag}-{name}", net=b.network,
                              lan_ip=str(ipaddress.ip_network(b.network["subnet"])[b.lan_first + i - 1])
                              if b.network else None)
            self._create_host(h, b, str(b.workdir), self._image(b.images[arch]))
            for net, ifname in links if i <= 2 else ():
                address = str(ipaddress.ip_network(net["subnet"])[LINK_HOSTS[i - 1]])
                self.engine.docker("network", "connect", "--ip", address, net["name"], h.container)
                h.links.append({"network": net["name"], "ip": address, "ifname": ifname, "mac": ""})
            b.hosts.append(h)

    def _create_host(self, h: ContainerHost, b, fleet: str, image: str) -> None:
        h.data_disk.parent.mkdir(parents=True, exist_ok=True)
        mkfs_data_disk(h.data_disk, DISK_SIZE)
        mount_data_disk(h.data_disk, h.data_mount)
        labels = ["--label", f"{LABEL}={self.engine.run_id}", "--label", f"{FLEET_LABEL}={fleet}"]
        volume = f"{h.container}-docker"
        self.engine.docker("volume", "create", *labels, volume)
        self.engine.docker("create", "--name", h.container, "--hostname", h.name, *labels,
                           "--network", MGMT, "--ip", h.ssh_host,
                           *flags.host_flags(volume, h.data_mount, b.memory_mb), *self.engine.lxcfs_mounts(), image)
        if b.network:
            self.engine.docker("network", "connect", "--ip", h.lan_ip, b.network["name"], h.container)

    def _pair_link(self, tag: str, fleet: str) -> list[tuple[dict, str]]:
        """The pair's link: one internal bridge per logical interface, the machine without an address on it."""
        out = []
        for subnet, ifname in zip(LINK_SUBNETS, LINK_IFNAMES, strict=True):
            name = f"lab-2-{tag}-{ifname}"
            self.engine.network_create(name, "--label", f"{FLEET_LABEL}={fleet}", "--internal", "--subnet", subnet,
                                       "-o", "com.docker.network.bridge.inhibit_ipv4=true")
            out.append(({"name": name, "subnet": subnet}, ifname))
        return out

    def _mac(self, container: str, network: str) -> str:
        out = self.engine.docker("inspect", "-f", "{{json .NetworkSettings.Networks}}", container).stdout
        return json.loads(out)[network]["MacAddress"]

    def _image(self, info) -> str:
        """The image's container output, imported into this engine once (tagged by its recipe hash)."""
        tag = f"specfleet-lab-host:{info.recipe_hash[:16]}"
        if self.engine.docker("image", "inspect", tag, check=False).returncode != 0:
            with open(info.container_tar, "rb") as tar:
                self.engine.docker("import", "--change", 'CMD ["/lib/systemd/systemd"]', "--change",
                                   "ENV container=docker", "-", tag, stdin=tar, timeout=900)
        return tag

    def start(self, b) -> None:
        for h in b.hosts:
            h.start()

    def ready(self, fleet, b) -> None:
        """A pair's link: its interfaces get a Spark's names now and at every boot (the ifnames unit reads the MACs
        docker gave them at the first start)."""
        for h in (h for h in fleet.guests if h.links):
            for link in h.links:
                link["mac"] = self._mac(h.container, link["network"])
            names = "".join(f"{link['mac']} {link['ifname']}\n" for link in h.links)
            h.ssh("mkdir -p /etc/specfleet-lab && cat > /etc/specfleet-lab/ifnames && "
                  "systemctl restart specfleet-lab-ifnames.service && networkctl reload", input=names.encode())
        b.save()

    # -- down
    def stop(self, workdir: Path, data: dict) -> None:
        """Remove the fleet's containers, their docker volumes and data disks, and its own networks; a fleet that
        owns the engine (`specfleet-lab up`) stops it too."""
        if self.engine.alive():
            self.engine.remove_labelled(f"{FLEET_LABEL}={workdir}")
        for g in data.get("guests", []):
            mount = Path(g.get("data_mount", ""))
            if mount.is_dir():
                subprocess.run(["umount", "-l", str(mount)], capture_output=True)
                with contextlib.suppress(OSError):
                    mount.rmdir()
            with contextlib.suppress(FileNotFoundError, KeyError):
                Path(g["data_disk"]).unlink()
        if self.owner == f"fleet:{workdir}":
            self.close()

    @staticmethod
    def sweep(everything: bool = False) -> list[str]:
        return sweep(everything)

    def close(self) -> None:
        left = self.engine.stop()
        for line in left:
            log.warning("lab engine %s: left behind: %s", self.engine.run_id, line)


def _tag(workdir) -> str:
    """A fleet's prefix on the engine (its containers, volumes, data disks): from its workdir."""
    return hashlib.sha256(str(workdir).encode()).hexdigest()[:6]


def sweep(everything: bool = False) -> list[str]:
    """Stop the runs whose owner is gone (a SIGKILLed test run; `everything`: every run, `down --all`); the run ids
    stopped."""
    stopped = []
    runs = lab_root() / "runs"
    for root in sorted(runs.iterdir()) if runs.is_dir() else ():
        try:
            owner = json.loads((root / "owner.json").read_text())
        except (OSError, ValueError):
            owner = {}
        if everything or not _owner_alive(owner):
            Engine(root).stop()
            stopped.append(root.name)
    return stopped


def _owner_alive(owner: dict) -> bool:
    """A session's run lives while its process does; a fleet's (`specfleet-lab up`) until its `down`."""
    kind = str(owner.get("owner", "")).split(":", 1)[0]
    if kind == "fleet":
        return True
    pid = owner.get("pid")
    return bool(pid) and Path(f"/proc/{pid}").exists()

