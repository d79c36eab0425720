"""One guest: its QEMU command line, and the `Guest` handle (state from its pid file, SSH/put/get as the
operator through sudo, power off, boot, wait until systemd is up). Root cannot log in over SSH, as on DGX OS:
everything runs as the operator OPERATOR, and a command for another user goes through `sudo -n -H`."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from .arch import ARCHES, DEFAULT_ARCH, parse_arch, qemu_binary
from .errors import SSHError, VMError
from .lan import Lan
from .local import pid_is_our_qemu, port_free, qesc, read_pid, tail, wait_gone
from .pair_link import PairLink

log = logging.getLogger(__name__)

#: The account the fleet logs in as (root SSH is disabled in the guests, as on DGX OS).
OPERATOR = "spark"

_SSH_OPTS = (
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "GlobalKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
    "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=8",
)


def qemu_argv(g: Guest, kernel: Path, initrd: Path, memory_mb: int, smp: int, accel: str,
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
        "-netdev", f"user,id=n0,hostname={hostname},hostfwd=tcp:127.0.0.1:{g.port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        *(g.lan.qemu_args(g.lan_host) if g.lan else ()),  # the shared guest network (lan.py)
        *(g.pair_link.qemu_args(g.pair_side) if g.pair_link else ()),  # a pair's CX-7 link (pair_link.py)
        "-device", "virtio-rng-pci",
        "-pidfile", str(g.pidfile),
    ]
    if daemonize:
        argv.append("-daemonize")
    return argv


def as_user(user: str, cmd: str) -> str:
    """The remote command line that runs shell command `cmd` as `user` from an OPERATOR login."""
    if user == OPERATOR:
        return cmd
    who = "" if user == "root" else f"-u {shlex.quote(user)} "
    return f"sudo -n -H {who}sh -c {shlex.quote(cmd)}"


@dataclasses.dataclass
class Guest:
    name: str
    port: int
    overlay: Path
    pidfile: Path
    console_log: Path
    key_path: Path
    argv: list[str]  # the QEMU command line; boot() reuses it (same overlay, same port)
    host: str = "127.0.0.1"
    boot_timeout: float = 900.0
    arch: str = DEFAULT_ARCH  # an ARCHES key (wheelhouse.guest_arch reads it)
    lan: Lan | None = None  # the shared guest network it is on (lan.py)
    lan_host: int = 0  # its host number there (its address: lan.address(lan_host))
    pair_link: PairLink | None = None  # the stand-in CX-7 link of the pair it is half of (pair_link.py)
    pair_side: int = 0  # 0 or 1: its end of that link

    @property
    def lan_address(self) -> str | None:
        return self.lan.address(self.lan_host) if self.lan else None

    # -- state
    @property
    def pid(self) -> int | None:
        pid = read_pid(self.pidfile)
        return pid if pid and pid_is_our_qemu(pid, self.overlay) else None

    def is_running(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict:
        return {"name": self.name, "port": self.port, "pidfile": str(self.pidfile),
                "overlay": str(self.overlay), "console_log": str(self.console_log),
                "key_path": str(self.key_path), "argv": self.argv,
                "boot_timeout": self.boot_timeout, "arch": self.arch,
                "lan": self.lan.to_json() if self.lan else None, "lan_host": self.lan_host,
                "pair_link": self.pair_link.to_json() if self.pair_link else None, "pair_side": self.pair_side}

    @classmethod
    def from_json(cls, d: dict) -> Guest:
        return cls(name=d["name"], port=int(d["port"]), overlay=Path(d["overlay"]),
                   pidfile=Path(d["pidfile"]), console_log=Path(d["console_log"]),
                   key_path=Path(d["key_path"]), argv=list(d.get("argv", [])),
                   boot_timeout=float(d.get("boot_timeout", 900.0)),
                   arch=parse_arch(d.get("arch") or DEFAULT_ARCH),
                   lan=Lan.from_json(d.get("lan")), lan_host=int(d.get("lan_host") or 0),
                   pair_link=PairLink.from_json(d.get("pair_link")), pair_side=int(d.get("pair_side") or 0))

    # -- remote access
    def ssh_base(self, connect_timeout: int = 20) -> list[str]:
        """`ssh` with the fleet's options, key and port; the destination and command follow."""
        return ["ssh", *_SSH_OPTS, "-o", f"ConnectTimeout={connect_timeout}",
                "-i", str(self.key_path), "-p", str(self.port)]

    def ssh(self, cmd: str, check: bool = True, timeout: float = 600, user: str = "root",
            input: bytes | None = None, connect_timeout: int = 20) -> subprocess.CompletedProcess:
        """Run a shell command on the guest as `user` (root by default); stdout/stderr are
        returned as text. The guest is reached as the operator OPERATOR (root cannot log in,
        as on DGX OS); another user's command runs through `sudo -n -H [-u user] sh -c CMD`."""
        remote = as_user(user, cmd)
        argv = [*self.ssh_base(connect_timeout), f"{OPERATOR}@{self.host}", remote]
        try:
            p = subprocess.run(argv, input=input if input is not None else b"",
                               capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise VMError(f"{self.name}: ssh command timed out after {timeout} s: {cmd}") from e
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        if check and p.returncode != 0:
            raise SSHError(p.returncode, f"[{self.name}] {cmd}", out, err)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def put(self, local: Path, remote: str, user: str = "root", timeout: float = 1800) -> None:
        """Copy a local file to `remote` on the guest, owned by `user`, with the local file's
        mode. Streamed over the operator's SSH session into `sudo ... sh -c 'cat > TMP'` and
        renamed into place (no staging copy anywhere else on the guest)."""
        local = Path(local)
        mode = f"{local.stat().st_mode & 0o7777:o}"
        q = shlex.quote(remote)
        tmp = shlex.quote(f"{remote}.specfleet-put-{os.getpid()}")
        script = (f"umask 077 && cat > {tmp} && chmod {mode} {tmp} && mv -f {tmp} {q} "
                  f"|| {{ rc=$?; rm -f {tmp}; exit $rc; }}")
        argv = [*self.ssh_base(), f"{OPERATOR}@{self.host}", as_user(user, script)]
        with open(local, "rb") as f:
            try:
                p = subprocess.run(argv, stdin=f, capture_output=True, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                raise VMError(f"{self.name}: put {local} -> {remote} timed out after {timeout} s") from e
        if p.returncode != 0:
            raise VMError(f"{self.name}: put {local} -> {remote} failed: "
                          f"{p.stderr.decode('utf-8', 'replace').strip()}")

    def get(self, remote: str, local: Path, user: str = "root", timeout: float = 1800) -> None:
        """Copy a guest file to `local`, read as `user` (root by default) with `sudo -n cat`."""
        local = Path(local)
        part = local.with_name(local.name + ".part")
        argv = [*self.ssh_base(), f"{OPERATOR}@{self.host}", as_user(user, f"cat {shlex.quote(remote)}")]
        with open(part, "wb") as f:
            try:
                p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.PIPE,
                                   timeout=timeout)
            except subprocess.TimeoutExpired as e:
                part.unlink(missing_ok=True)
                raise VMError(f"{self.name}: get {remote} -> {local} timed out after {timeout} s") from e
        if p.returncode != 0:
            part.unlink(missing_ok=True)
            raise VMError(f"{self.name}: get {remote} -> {local} failed: "
                          f"{p.stderr.decode('utf-8', 'replace').strip()}")
        os.replace(part, local)

    def login_command(self) -> str:
        """How a person logs in to this guest (as the operator; `sudo -i` for a root shell)."""
        return (f"ssh -i {shlex.quote(str(self.key_path))} -p {self.port} -o StrictHostKeyChecking=no "
                f"-o UserKnownHostsFile=/dev/null {OPERATOR}@{self.host}")

    # -- power
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

    def start(self) -> None:
        """Start QEMU (daemonized) without waiting for the guest."""
        if self.is_running():
            raise VMError(f"{self.name} is already running (pid {self.pid})")
        with contextlib.suppress(FileNotFoundError):
            self.pidfile.unlink()
        p = subprocess.run(self.argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if p.returncode != 0:
            raise VMError(f"{self.name}: qemu failed to start ({p.returncode}): "
                          f"{p.stderr.strip()}")
        if self.pid is None:
            raise VMError(f"{self.name}: qemu started but is not running:\n{p.stderr.strip()}\n"
                          f"{tail(self.console_log)}")
        log.debug("%s: qemu pid %s, ssh port %d", self.name, self.pid, self.port)

    def boot(self, wait: bool = True) -> None:
        """Start the guest again from its overlay on the same port; optionally wait for it."""
        # Connections the dead QEMU left in TIME_WAIT hold the port for up to a minute on some
        # kernels (even with SO_REUSEADDR): wait them out before giving up.
        deadline = time.monotonic() + 90
        while not port_free(self.port):
            if time.monotonic() > deadline:
                raise VMError(f"{self.name}: port {self.port} is in use; cannot boot")
            time.sleep(1)
        self.start()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> str:
        """Wait for SSH and for systemd to finish booting. Returns running/degraded."""
        timeout = timeout or float(os.environ.get("SPECFLEET_VM_BOOT_TIMEOUT", self.boot_timeout))
        deadline = time.monotonic() + timeout

        def fail(why: str) -> VMError:
            return VMError(f"{self.name} (ssh port {self.port}): {why}\n"
                           f"--- tail of {self.console_log} ---\n{tail(self.console_log)}")

        while True:
            if not self.is_running():
                raise fail("QEMU exited while waiting for the guest to boot")
            left = deadline - time.monotonic()
            if left <= 0:
                raise fail(f"no SSH after {timeout:.0f} s")
            r = self.ssh("true", check=False, timeout=min(left, 60), user=OPERATOR,
                         connect_timeout=max(1, min(int(left), 20)))
            if r.returncode == 0:
                break
            time.sleep(1)
        left = max(5, deadline - time.monotonic())
        try:
            r = self.ssh("systemctl is-system-running --wait", check=False, timeout=left,
                         user=OPERATOR)
        except VMError:
            raise fail(f"systemd did not finish booting within {timeout:.0f} s") from None
        state = r.stdout.strip()
        if state == "degraded":
            failed = self.ssh("systemctl --failed --no-pager --no-legend", check=False).stdout
            log.warning("%s is degraded; failed units:\n%s", self.name, failed.rstrip())
        elif state != "running":
            raise fail(f"systemctl is-system-running --wait said {state!r} {r.stderr.strip()}")
        return state
