"""The QEMU driver: each host a guest with a kernel of its own, booted from a qcow2 overlay of the cached disk image,
under TCG (or KVM once a probe boot proved it works here). Its SSH answers on a user-mode NAT port forward on the
controller's loopback; a shared network (lan.py) and a pair's CX-7 link (pair_link.py) are QEMU socket networks."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

from ..drivers import Driver
from ..errors import VMError
from ..local import free_port, read_pid, run
from .accel import choose_accel, default_smp
from .guest import CONTROLLER_ADDRESS, QemuHost, qemu_argv
from .lan import Lan, new_lan
from .pair_link import new_pair_link
from .process import stop_qemu

log = logging.getLogger(__name__)


class QemuDriver(Driver):
    name = "qemu"
    controller_address = CONTROLLER_ADDRESS  # user-mode NAT's gateway: the controller's loopback
    bind_address = "127.0.0.1"

    @classmethod
    def create_for(cls, workdir=None, owner: str | None = None) -> QemuDriver:
        return cls()

    @classmethod
    def from_json(cls, d: dict) -> QemuDriver:
        return cls()

    def new_network(self) -> Lan:
        return new_lan()

    def host_from_json(self, d: dict) -> QemuHost:
        return QemuHost.from_json(d)

    def leftovers(self, workdir: Path) -> list[str]:
        """Live QEMU processes whose command line names the workdir, and its overlays and pid files."""
        left = []
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if proc.name.isdigit() and b"qemu" in (cmd := (proc / "cmdline").read_bytes()) \
                        and str(workdir).encode() in cmd:
                    left.append(f"QEMU pid {proc.name}")
        return left + [str(p) for pattern in ("*.qcow2", "*.pid") for p in sorted(workdir.glob(pattern))]

    def create(self, b) -> None:
        """One guest per arch entry (spark-1, spark-2, ...), each on a fresh qcow2 overlay of its arch's image, on
        the shared network from host number b.lan_first on; the accelerator and vCPUs of each arch."""
        t0 = time.monotonic()
        accels = {a: (b.accel or choose_accel(i, b.cache_dir)) for a, i in b.images.items()}
        smps = {a: b.smp or default_smp(len(b.arches), a) for a in b.images}
        b.timings.update(accel_choice_s=round(time.monotonic() - t0, 1),
                         accel=next(iter(accels.values())) if len(set(accels.values())) == 1 else accels,
                         smp=next(iter(smps.values())) if len(set(smps.values())) == 1 else smps,
                         count=len(b.arches), memory_mb=b.memory_mb, arches=list(b.arches))
        link = new_pair_link() if b.pair_link else None
        for i, a in enumerate(b.arches, start=1):
            name = f"spark-{i}"
            overlay = b.workdir / f"{name}.qcow2"
            with contextlib.suppress(FileNotFoundError):
                overlay.unlink()
            run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", b.images[a].disk, "-F", "raw", overlay],
                capture_output=True)
            g = QemuHost(name=name, key_path=b.images[a].key, ssh_port=0, overlay=overlay,
                         pidfile=b.workdir / f"{name}.pid", console_log=b.workdir / f"{name}.console.log", arch=a,
                         lan=b.network, lan_host=b.lan_first + i - 1,
                         pair_link=link if link and i <= 2 else None, pair_side=i - 1 if i <= 2 else 0)
            with contextlib.suppress(FileNotFoundError):
                g.console_log.unlink()
            g.accel, g.smp = accels[a], smps[a]
            b.hosts.append(g)
        log.info("booting %d guest(s) (%s): accel=%s smp=%s memory=%d MiB", len(b.arches), ",".join(b.arches),
                 b.timings["accel"], b.timings["smp"], b.memory_mb)

    def start(self, b) -> None:
        used: set[int] = set()
        for g in b.hosts:
            self._start_on_a_free_port(b, g, used)
            used.add(g.ssh_port)
            b.save()

    @staticmethod
    def _start_on_a_free_port(b, g: QemuHost, used: set[int]) -> None:
        img = b.images[g.arch]
        for attempt in range(5):  # a port may be grabbed between probe and bind
            g.ssh_port = free_port(avoid=used)
            g.argv = qemu_argv(g, img.kernel, img.initrd, b.memory_mb, g.smp, g.accel, hostname=g.name)
            try:
                g.launch()
                return
            except VMError as e:
                port_clash = "hostfwd" in str(e) or "forwarding" in str(e)
                if not port_clash or attempt == 4:
                    raise

    def ready(self, fleet, b) -> None:
        """A pair's link: name its NICs like a Spark's (the .link files stay in the guests)."""
        pair = [g for g in fleet.guests if g.pair_link]
        if pair:
            fleet._parallel(lambda g: g.ssh(g.pair_link.name_command(g.pair_side)), pair)

    def stop(self, workdir: Path, data: dict) -> None:
        """Stop the QEMU processes the fleet started (found by pid file, checked by command line) and remove their
        overlays and pid files."""
        entries: dict[Path, Path] = {}  # pidfile -> overlay
        for g in data.get("guests", []):
            with contextlib.suppress(KeyError):
                entries[Path(g["pidfile"])] = Path(g["overlay"])
        for pf in workdir.glob("*.pid"):  # e.g. fleet.json lost: our naming convention
            entries.setdefault(pf, pf.with_suffix(".qcow2"))
        for pidfile, overlay in entries.items():
            pid = read_pid(pidfile)
            if pid is not None:
                if stop_qemu(pid, overlay):
                    log.info("stopped QEMU pid %d (%s)", pid, overlay.name)
                elif Path(f"/proc/{pid}").exists():
                    log.debug("pid %d is not our QEMU for %s; left alone", pid, overlay)
            for p in (pidfile, overlay):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
