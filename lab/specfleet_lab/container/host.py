"""A container host: systemd as PID 1 in a container of the lab's engine, sshd and an inner dockerd, reached over SSH
at its fixed address on the engine's management network. Power is the container: `docker kill` (SIGKILL to every
process, like pulling the plug), `docker start` (systemd boots again from the same root, volume and data disk),
`docker pause`/`unpause` (the freezer cgroup). Its data directory is a loop-mounted ext4 file of the QEMU disk's size
on the machine, mounted again before each start."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
from pathlib import Path

from ..errors import VMError
from ..host import Host
from .engine import Engine

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ContainerHost(Host):
    container: str = ""  # the container's name on the engine
    engine_root: Path = Path()
    data_disk: Path = Path()  # the ext4 file of its data directory
    data_mount: Path = Path()  # where the machine mounts it (bound into the container at DATA_DIR)
    lan_ip: str | None = None
    net: dict | None = None  # the shared network it is on: {"name", "subnet"} (driver.new_network)
    links: list = dataclasses.field(default_factory=list)  # a pair host's link: [{"network", "ip", "ifname", "mac"}]
    #: a container boots in seconds; minutes without SSH is a fault, not a slow machine
    boot_timeout: float = 180.0

    driver = "container"

    @property
    def engine(self) -> Engine:
        return Engine(self.engine_root)

    @property
    def lan_address(self) -> str | None:
        return self.lan_ip

    @property
    def network(self) -> dict | None:
        return self.net

    def to_json(self) -> dict:
        return {**super().to_json(), "container": self.container, "engine_root": str(self.engine_root),
                "data_disk": str(self.data_disk), "data_mount": str(self.data_mount), "lan_ip": self.lan_ip,
                "net": self.net, "links": self.links}

    @classmethod
    def from_json(cls, d: dict) -> ContainerHost:
        return cls(name=d["name"], key_path=Path(d["key_path"]), ssh_host=d["ssh_host"], ssh_port=int(d["ssh_port"]),
                   arch=d.get("arch") or "x86_64", boot_timeout=float(d.get("boot_timeout", 180.0)),
                   container=d["container"], engine_root=Path(d["engine_root"]), data_disk=Path(d["data_disk"]),
                   data_mount=Path(d["data_mount"]), lan_ip=d.get("lan_ip"), net=d.get("net"),
                   links=list(d.get("links") or []))

    def _state(self) -> dict:
        if not self.engine.alive():
            return {}
        p = self.engine.docker("inspect", "-f", "{{json .State}}", self.container, check=False, timeout=60)
        return {} if p.returncode else json.loads(p.stdout)

    def is_running(self) -> bool:
        return bool(self._state().get("Running"))

    def poweroff(self) -> None:
        """SIGKILL to every process of the host at once (docker kill): nothing gets to shut down."""
        if self.is_running():
            self.engine.docker("kill", self.container)
            log.info("%s: powered off (docker kill)", self.name)

    def start(self) -> None:
        if self.is_running():
            raise VMError(f"{self.name} is already running")
        mount_data_disk(self.data_disk, self.data_mount)
        self.engine.docker("start", self.container)

    def pause(self) -> None:
        if self.is_running() and not self._state().get("Paused"):
            self.engine.docker("pause", self.container)

    def resume(self) -> None:
        if self._state().get("Paused"):
            self.engine.docker("unpause", self.container)

    def console(self, lines: int = 40) -> str:
        """The end of this boot's journal (a container host has no console of its own: systemd writes there), read
        with `docker exec`, so that it comes also when SSH does not; else what the container printed (docker logs)."""
        if not self.engine.alive():
            return "<the lab's engine is not running>"
        p = self.engine.docker("exec", self.container, "journalctl", "-b", "-q", "--no-pager", "-n", str(lines),
                               check=False, timeout=60)
        if p.returncode != 0 or not p.stdout.strip():
            p = self.engine.docker("logs", "--tail", str(lines), self.container, check=False, timeout=60)
        return (p.stdout + p.stderr).decode("utf-8", "replace")


def mount_data_disk(disk: Path, mount: Path) -> None:
    """Mount a host's data disk (a loop device that goes with the unmount), unless it is mounted."""
    mount.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mountpoint", "-q", str(mount)]).returncode != 0:
        p = subprocess.run(["mount", "-o", "loop", str(disk), str(mount)], capture_output=True, text=True)
        if p.returncode != 0:
            raise VMError(f"mounting the data disk {disk} on {mount} failed: {p.stderr.strip()}")
