"""A container host's `docker create` flags, each with why it is there, and whether the driver can run on this
machine at all (`why_not`: one line, on which the lab falls back to QEMU). Measured on the developers' and CI's
machines (../shared/reference/container-lab.md); docs/dev/lab.md explains them for the next engineer."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .engine import DOCKERD, LXCFS

DATA_DIR = "/var/lib/specfleet"  # the deploy's data_dir (its default): a bounded filesystem of its own


def host_flags(docker_volume: str, data_mount: Path, memory_mb: int) -> list[str]:
    return [
        # everything a host's systemd, sshd and inner dockerd need, without --privileged (which fails where the
        # machine's bounding set lacks CAP_SYS_RESOURCE: docker 20.10 ignores --cap-drop with --privileged); without
        # SYS_TIME and SYS_MODULE the clock and the kernel stay the machine's
        "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--cap-drop", "SYS_TIME", "--cap-drop", "SYS_MODULE",
        # the inner dockerd makes its own seccomp and AppArmor decisions
        "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        # the inner dockerd enables forwarding at start and fails where it cannot (/proc/sys is read-only otherwise)
        "--sysctl", "net.ipv4.ip_forward=1",
        # systemd as PID 1 needs the cgroup tree (v1: the machine's hierarchies) and a tmpfs /run
        "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
        # the inner dockerd's overlay2 needs a real filesystem under it (not the container's own overlay)
        "-v", f"{docker_volume}:/var/lib/docker",
        # the data directory: a loop-mounted ext4 file of the QEMU disk's size (a full disk fills the host only)
        "-v", f"{data_mount}:{DATA_DIR}",
        # a QEMU guest's memory, and no swap beyond it
        "--memory", f"{memory_mb}m", "--memory-swap", f"{memory_mb}m",
        # `docker stop` is a clean shutdown of systemd (SIGRTMIN+3), not SIGTERM (which systemd ignores)
        "--stop-signal", "SIGRTMIN+3",
    ]


def why_not(arches: list, machine_arch: str) -> str | None:
    """Why container hosts cannot run here (None: they can): the tools, root, cgroup v1 (cgroup v2 is untested), the
    FORWARD policy (containers of one network reach each other through the machine's bridge), no other engine
    that manages iptables, and hosts of the machine's own architecture."""
    foreign = sorted({a for a in arches if a != machine_arch})
    if foreign:
        return f"{', '.join(foreign)} hosts on this {machine_arch} machine need their own kernel (QEMU)"
    if os.geteuid() != 0:
        return "the lab's engine runs as root"
    for tool, package in ((DOCKERD, "docker.io"), (LXCFS, "lxcfs"), (shutil.which("mkfs.ext4") or "", "e2fsprogs")):
        if not tool or not os.access(tool, os.X_OK):
            return f"{tool or 'mkfs.ext4'} is missing (apt-get install {package}; tests/install-deps.sh does)"
    if Path("/sys/fs/cgroup/cgroup.controllers").exists() and not Path("/sys/fs/cgroup/memory").is_dir():
        return "cgroup v2 (unified): container hosts are tried on cgroup v1 only (docs/dev/lab.md)"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse: lxcfs cannot show a host its memory limit"
    forward = _forward_policy()
    if forward:
        return forward
    other = _other_engine()
    return other


def _forward_policy() -> str | None:
    iptables = shutil.which("iptables")
    if not iptables:
        return None  # no tool to change it either: the kernel's default, ACCEPT
    p = subprocess.run([iptables, "-S", "FORWARD"], capture_output=True, text=True)
    if p.returncode == 0 and "-P FORWARD DROP" in p.stdout:
        return "the machine's FORWARD policy is DROP: containers on one network could not reach each other"
    return None


def _other_engine() -> str | None:
    """A dockerd in the machine's own PID namespace that manages iptables (a lab host's inner dockerd is in its
    container's namespace, and the lab's engines run with --iptables=false)."""
    ours = os.readlink("/proc/self/ns/pid")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if os.readlink(proc / "ns" / "pid") != ours:
                continue
        except OSError:
            continue
        if argv and argv[0].endswith(b"dockerd") and b"--iptables=false" not in argv:
            return (f"another docker engine runs (pid {proc.name}) and manages iptables: it can set FORWARD to "
                    "DROP under the lab's hosts")
    return None
