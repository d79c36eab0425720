"""A QEMU guest: its command line, and `QemuHost`, the lab host it is (state from its pid file; power is the QEMU
process: SIGKILL to power off, SIGSTOP/SIGCONT to pause and resume; SSH through a user-mode NAT port forward on the
controller's loopback)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import time
from pathlib import Path

from ..arch import ARCHES, parse_arch, qemu_binary
from ..errors import VMError
from ..host import Host
from ..local import port_free, read_pid, tail
from .lan import Lan
from .pair_link import PairLink
from .process import pid_is_our_qemu, qesc, wait_gone

log = logging.getLogger(__name__)

#: How a QEMU guest sees the controller: user-mode NAT's gateway, which is the controller's loopback.
CONTROLLER_ADDRESS = "10.0.2.2"


def qemu_argv(g: QemuHost, kernel: Path, initrd: Path, memory_mb: int, smp: int, accel: str,
              hostname: str, daemonize: bool = True) -> list[str]:
    a = ARCHES[parse_arch(g.arch)]
    if accel == "kvm":
        accel_args = ["-accel", "kvm", "-cpu", "host"]
    else:
        accel_args = ["-accel", "tcg,thread=multi", "-cpu", a.tcg_cpu]
    argv = [
        qemu_binary(a.name), "-name", g.name, *a.machine_args, *accel_args,
        "-smp", str(smp), "-m", str(memory_mb),
        "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
        # append: a guest booted again after poweroff() keeps the earlier boots' console
        "-chardev", f"file,id=con0,path={qesc(g.console_log)},append=on",
        "-serial", "chardev:con0",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", f"{a.cmdline} systemd.hostname={hostname}" + (f" {g.lan.kernel_args(g.lan_host)}" if g.lan else ""),
        "-drive", f"file={qesc(g.overlay)},format=qcow2,if=virtio",
        "-netdev", f"user,id=n0,hostname={hostname},hostfwd=tcp:127.0.0.1:{g.ssh_port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        *(g.lan.qemu_args(g.lan_host) if g.lan else ()),  # the shared guest network (lan.py)
        *(g.pair_link.qemu_args(g.pair_side) if g.pair_link else ()),  # a pair's CX-7 link (pair_link.py)
        "-device", "virtio-rng-pci",
        "-pidfile", str(g.pidfile),
    ]
    if daemonize:
        argv.append("-daemonize")
    return argv


@dataclasses.dataclass
class QemuHost(Host):
    """A QEMU guest. `argv` is its command line: boot() reuses it (the same overlay, the same SSH port)."""

    overlay: Path = Path()
    pidfile: Path = Path()
    console_log: Path = Path()
    argv: list[str] = dataclasses.field(default_factory=list)
    accel: str = "tcg"  # tcg or kvm (accel.choose_accel)
    smp: int = 1  # vCPUs
    lan: Lan | None = None  # the shared guest network it is on (lan.py)
    lan_host: int = 0  # its host number there (its address: lan.address(lan_host))
    pair_link: PairLink | None = None  # the stand-in CX-7 link of the pair it is half of (pair_link.py)
    pair_side: int = 0  # 0 or 1: its end of that link

    driver = "qemu"

    @property
    def lan_address(self) -> str | None:
        return self.lan.address(self.lan_host) if self.lan else None

    @property
    def network(self) -> Lan | None:
        return self.lan

    @property
    def pid(self) -> int | None:
        pid = read_pid(self.pidfile)
        return pid if pid and pid_is_our_qemu(pid, self.overlay) else None

    def is_running(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict:
        return {**super().to_json(), "pidfile": str(self.pidfile), "overlay": str(self.overlay),
                "console_log": str(self.console_log), "argv": self.argv,
                "lan": self.lan.to_json() if self.lan else None, "lan_host": self.lan_host,
                "pair_link": self.pair_link.to_json() if self.pair_link else None, "pair_side": self.pair_side}

    @classmethod
    def from_json(cls, d: dict) -> QemuHost:
        return cls(name=d["name"], ssh_host=d.get("ssh_host", "127.0.0.1"), ssh_port=int(d["ssh_port"]),
                   overlay=Path(d["overlay"]), pidfile=Path(d["pidfile"]), console_log=Path(d["console_log"]),
                   key_path=Path(d["key_path"]), argv=list(d.get("argv", [])),
                   boot_timeout=float(d.get("boot_timeout", 900.0)), arch=parse_arch(d.get("arch") or "x86_64"),
                   lan=Lan.from_json(d.get("lan")), lan_host=int(d.get("lan_host") or 0),
                   pair_link=PairLink.from_json(d.get("pair_link")), pair_side=int(d.get("pair_side") or 0))

    def console(self, lines: int = 40) -> str:
        return tail(self.console_log, lines)

    # -- power: the QEMU process
    def poweroff(self) -> None:
        """Hard power-off (SIGKILL the QEMU process), like pulling the plug."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not wait_gone(pid, self.overlay, 10):
                raise VMError(f"{self.name}: QEMU pid {pid} survived SIGKILL")
            log.info("%s: powered off (killed QEMU pid %d)", self.name, pid)
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        pid = self.pid
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def start(self) -> None:
        """Start QEMU (daemonized) on the same port. Connections the dead QEMU left in TIME_WAIT hold the port for
        up to a minute on some kernels (even with SO_REUSEADDR): they are waited out first."""
        if self.is_running():
            raise VMError(f"{self.name} is already running (pid {self.pid})")
        deadline = time.monotonic() + 90
        while not port_free(self.ssh_port):
            if time.monotonic() > deadline:
                raise VMError(f"{self.name}: port {self.ssh_port} is in use; cannot boot")
            time.sleep(1)
        self.launch()

    def launch(self) -> None:
        """Run QEMU's command line (it daemonizes) and check that it runs."""
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()
        p = subprocess.run(self.argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if p.returncode != 0:
            raise VMError(f"{self.name}: qemu failed to start ({p.returncode}): {p.stderr.strip()}")
        if self.pid is None:
            raise VMError(f"{self.name}: qemu started but is not running:\n{p.stderr.strip()}\n{self.console()}")
        log.debug("%s: qemu pid %s, ssh port %d", self.name, self.pid, self.ssh_port)
