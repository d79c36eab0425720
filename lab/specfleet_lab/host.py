"""The seam between the tests and the drivers: one lab host, whichever driver runs it (a QEMU guest, or a container
on the lab's own docker engine). Molecule's pattern: the tests and fixtures above this file speak only of a `Host`
and a `Fleet` (state.py); each driver (qemu/, container/) says how a host is started, stopped and reached.

What every host has, whatever runs it: SSH as the operator OPERATOR, with the fleet's key (root cannot log in, as on
DGX OS; a command for root or another user goes through `sudo -n -H`), copies in and out over that session, an
address on the fleet's shared network, and power (off, boot, pause, resume). What a driver adds is its own state
(a pid file, a container id), which nothing above the seam reads."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import subprocess
import time
from pathlib import Path

from .arch import DEFAULT_ARCH
from .errors import SSHError, VMError

log = logging.getLogger(__name__)

#: The account the fleet logs in as (root SSH is disabled on the hosts, as on DGX OS).
OPERATOR = "spark"

_SSH_OPTS = (
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "GlobalKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
    "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=8",
)


def as_user(user: str, cmd: str) -> str:
    """The remote command line that runs shell command `cmd` as `user` from an OPERATOR login."""
    if user == OPERATOR:
        return cmd
    who = "" if user == "root" else f"-u {shlex.quote(user)} "
    return f"sudo -n -H {who}sh -c {shlex.quote(cmd)}"


@dataclasses.dataclass
class Host:
    """A lab host. Subclasses (one per driver) implement the power methods and say where SSH answers."""

    name: str
    key_path: Path
    ssh_host: str = "127.0.0.1"  # where the controller reaches its sshd
    ssh_port: int = 22
    arch: str = DEFAULT_ARCH  # an arch.ARCHES key
    boot_timeout: float = 900.0

    driver = "base"  # the driver's name, as fleet.json and `up(driver=...)` spell it

    # -- what the drivers implement
    @property
    def lan_address(self) -> str | None:
        """Its address on the fleet's shared network (None: on none)."""
        raise NotImplementedError

    @property
    def network(self):
        """The driver's handle of that network (JSON-able), which up(lan=...) takes to join it."""
        raise NotImplementedError

    def is_running(self) -> bool:
        raise NotImplementedError

    def poweroff(self) -> None:
        """Hard power-off, like pulling the plug: nothing on the host gets to shut down."""
        raise NotImplementedError

    def start(self) -> None:
        """Power on without waiting for the host."""
        raise NotImplementedError

    def pause(self) -> None:
        """Freeze the host (its CPUs stop; memory, disks and connections stay)."""
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def console(self, lines: int = 40) -> str:
        """The end of what the host printed while booting (its console), for a failure's message."""
        raise NotImplementedError

    def to_json(self) -> dict:
        return {"driver": self.driver, "name": self.name, "key_path": str(self.key_path), "ssh_host": self.ssh_host,
                "ssh_port": self.ssh_port, "arch": self.arch, "boot_timeout": self.boot_timeout}

    # -- power, the same for every driver
    def boot(self, wait: bool = True) -> None:
        """Power on again (the same disk, addresses and SSH endpoint); optionally wait until systemd is up."""
        self.start()
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float | None = None) -> str:
        """Wait for SSH and for systemd to finish booting. Returns running/degraded."""
        timeout = timeout or float(os.environ.get("SPECFLEET_VM_BOOT_TIMEOUT", self.boot_timeout))
        deadline = time.monotonic() + timeout

        def fail(why: str) -> VMError:
            return VMError(f"{self.name} ({self.driver}, ssh {self.ssh_host}:{self.ssh_port}): {why}\n"
                           f"--- its console ---\n{self.console()}")

        while True:
            if not self.is_running():
                raise fail("it stopped while waiting for it to boot")
            left = deadline - time.monotonic()
            if left <= 0:
                raise fail(f"no SSH after {timeout:.0f} s")
            r = self.ssh("true", check=False, timeout=min(left, 60), user=OPERATOR,
                         connect_timeout=max(1, min(int(left), 20)))
            if r.returncode == 0:
                break
            time.sleep(0.5)
        left = max(5, deadline - time.monotonic())
        try:
            r = self.ssh("systemctl is-system-running --wait", check=False, timeout=left, user=OPERATOR)
        except VMError:
            raise fail(f"systemd did not finish booting within {timeout:.0f} s") from None
        state = r.stdout.strip()
        if state == "degraded":
            failed = self.ssh("systemctl --failed --no-pager --no-legend", check=False).stdout
            log.warning("%s is degraded; failed units:\n%s", self.name, failed.rstrip())
        elif state != "running":
            raise fail(f"systemctl is-system-running --wait said {state!r} {r.stderr.strip()}")
        return state

    # -- remote access, the same for every driver
    def ssh_base(self, connect_timeout: int = 20) -> list[str]:
        """`ssh` with the fleet's options, key and port; the destination and command follow."""
        return ["ssh", *_SSH_OPTS, "-o", f"ConnectTimeout={connect_timeout}",
                "-i", str(self.key_path), "-p", str(self.ssh_port)]

    def ssh_argv(self, remote: str, user: str = OPERATOR) -> list[str]:
        """The whole `ssh` command line that runs shell command `remote` on the host as `user`."""
        return [*self.ssh_base(), f"{OPERATOR}@{self.ssh_host}", as_user(user, remote)]

    def ssh(self, cmd: str, check: bool = True, timeout: float = 600, user: str = "root",
            input: bytes | None = None, connect_timeout: int = 20) -> subprocess.CompletedProcess:
        """Run a shell command on the host as `user` (root by default); stdout/stderr are returned as text. The host
        is reached as the operator OPERATOR; another user's command runs through `sudo -n -H [-u user] sh -c CMD`."""
        argv = [*self.ssh_base(connect_timeout), f"{OPERATOR}@{self.ssh_host}", as_user(user, cmd)]
        try:
            p = subprocess.run(argv, input=input if input is not None else b"", capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise VMError(f"{self.name}: ssh command timed out after {timeout} s: {cmd}") from e
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        if check and p.returncode != 0:
            raise SSHError(p.returncode, f"[{self.name}] {cmd}", out, err)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def put(self, local: Path, remote: str, user: str = "root", timeout: float = 1800) -> None:
        """Copy a local file to `remote` on the host, owned by `user`, with the local file's mode. Streamed over the
        operator's SSH session into `sudo ... sh -c 'cat > TMP'` and renamed into place (no staging copy anywhere
        else on the host)."""
        local = Path(local)
        mode = f"{local.stat().st_mode & 0o7777:o}"
        q = shlex.quote(remote)
        tmp = shlex.quote(f"{remote}.specfleet-put-{os.getpid()}")
        script = (f"umask 077 && cat > {tmp} && chmod {mode} {tmp} && mv -f {tmp} {q} "
                  f"|| {{ rc=$?; rm -f {tmp}; exit $rc; }}")
        with open(local, "rb") as f:
            try:
                p = subprocess.run(self.ssh_argv(script, user), stdin=f, capture_output=True, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                raise VMError(f"{self.name}: put {local} -> {remote} timed out after {timeout} s") from e
        if p.returncode != 0:
            raise VMError(f"{self.name}: put {local} -> {remote} failed: {p.stderr.decode('utf-8', 'replace').strip()}")

    def get(self, remote: str, local: Path, user: str = "root", timeout: float = 1800) -> None:
        """Copy a host's file to `local`, read as `user` (root by default) with `sudo -n cat`."""
        local = Path(local)
        part = local.with_name(local.name + ".part")
        with open(part, "wb") as f:
            try:
                p = subprocess.run(self.ssh_argv(f"cat {shlex.quote(remote)}", user), stdin=subprocess.DEVNULL,
                                   stdout=f, stderr=subprocess.PIPE, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                part.unlink(missing_ok=True)
                raise VMError(f"{self.name}: get {remote} -> {local} timed out after {timeout} s") from e
        if p.returncode != 0:
            part.unlink(missing_ok=True)
            raise VMError(f"{self.name}: get {remote} -> {local} failed: {p.stderr.decode('utf-8', 'replace').strip()}")
        os.replace(part, local)

    def login_command(self) -> str:
        """How a person logs in to this host (as the operator; `sudo -i` for a root shell)."""
        return (f"ssh -i {shlex.quote(str(self.key_path))} -p {self.ssh_port} -o StrictHostKeyChecking=no "
                f"-o UserKnownHostsFile=/dev/null {OPERATOR}@{self.ssh_host}")
