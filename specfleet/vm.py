"""A fleet of real systemd VMs under QEMU that stand in for DGX Spark hosts in CI.

What a guest is
---------------
A Debian 12 (bookworm) system built with ``mmdebstrap --variant=minbase`` and the
packages a deploy relies on (systemd, openssh-server, python3 + venv, docker.io with
AppArmor, curl, iproute2, sudo, ...). The root filesystem is turned into a sparse raw
ext4 image with ``mkfs.ext4 -d`` and booted directly with the guest kernel (no
bootloader). Every guest runs on its own qcow2 copy-on-write overlay of the cached
image, so guests are independent and the image is never modified.

Like a DGX OS host a guest is reached as the operator user ``spark`` (uid 1000, bash,
passwordless sudo, *not* in the ``docker`` group) with the fleet's generated ed25519 key;
root cannot log in over SSH (``PermitRootLogin no``). The fleet's inventory connects as
``spark`` with ``_sudo: true``, and :meth:`Guest.ssh` / :meth:`Guest.put` /
:meth:`Guest.get` run as root through ``sudo -n`` (``user=`` selects another account).
Each guest gets its own machine-id, SSH host keys and hostname (``spark-N``) at first boot.

The NVIDIA container toolkit: a STAND-IN
-----------------------------------------
A Spark always runs the serving container with ``--gpus=all`` and needs docker's
``nvidia`` runtime (specfleet's preflight checks for it). The guests have no GPU, so the
image carries a documented stand-in that does nothing and says so:

* ``/usr/local/bin/nvidia-container-runtime-STANDIN``, registered in
  ``/etc/docker/daemon.json`` as the runtime ``nvidia``: it only execs runc.
* ``/usr/bin/nvidia-container-runtime-hook``: a no-op OCI prestart hook (reads the
  container state from stdin, exits 0). dockerd registers its ``--gpus`` device driver
  only when a binary of exactly this name is on its PATH at start, and then adds it to
  every ``--gpus`` container as a prestart hook with the arguments
  ``nvidia-container-runtime-hook prestart`` (moby v20.10.24, the version of Debian 12's
  docker.io, ``daemon/nvidia_linux.go``: ``const nvidiaHook =
  "nvidia-container-runtime-hook"``, ``init()`` -> ``exec.LookPath(nvidiaHook)`` ->
  ``registerDeviceDriver("nvidia", ...)``; ``setNvidiaGPUs`` appends ``specs.Hook{Path:
  path, Args: []string{nvidiaHook, "prestart"}}`` and sets ``NVIDIA_VISIBLE_DEVICES``).
  ``nvidia-container-runtime-hook --version`` prints ``STAND-IN``; testinfra's real-GPU
  tier skips a host whose hook says so.

CI-only differences (kept short on purpose)
-------------------------------------------
* Debian 12 instead of DGX OS 7 (Ubuntu 24.04); no GPU (the NVIDIA container toolkit is
  the stand-in above). Guests are x86_64 by default; ``up(arch="arm64")`` (CLI ``--arch
  arm64``, or ``x86_64,arm64`` for one arch per guest) gives aarch64 guests like a Spark:
  an arm64 image (``linux-image-arm64``; its own recipe hash, cached side by side), built
  by mmdebstrap through qemu-user (binfmt_misc) with a MODULES=list initramfs, booted by
  ``qemu-system-aarch64 -M virt`` (always TCG on an x86_64 host; console ttyAMA0).
* QEMU user-mode networking: each guest is 10.0.2.15, reaches the controller at
  10.0.2.2, uses slirp's DNS 10.0.2.3 (static /etc/resolv.conf), and is reached by
  the controller through a per-guest SSH port forward on 127.0.0.1.
* TCG emulation (nested KVM is broken on the CI machines); KVM is used only when a
  one-off probe boot proves it works.
* Kernel command line adds ``mitigations=off`` (CPU side-channel mitigations only
  cost time under TCG) and ``tsc=reliable`` (TCG's TSC is the host's monotonic clock;
  without it the guest's clocksource watchdog falls back to the emulated HPET and a
  guest boots ~1.4x slower).
* SSH host keys are ed25519 + ecdsa only (RSA key generation takes ~25 s under TCG).
* Docs and man pages are not installed (smaller image, faster build).

Environment overrides: ``SPECFLEET_VM_DIR`` (workdir), ``SPECFLEET_CACHE_DIR``
(image cache), ``SPECFLEET_VM_ACCEL`` (``auto``/``tcg``/``kvm``), ``SPECFLEET_VM_SMP``
(vCPUs per guest), ``SPECFLEET_VM_BOOT_TIMEOUT`` (seconds).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Sequence

import click
import yaml

log = logging.getLogger("specfleet.vm")

# --------------------------------------------------------------------------- recipe

#: Bump to force a rebuild of every cached image (changes the recipe hash).
RECIPE_VERSION = 2  # 2: operator-only SSH (PermitRootLogin no), stand-in NVIDIA container toolkit

SUITE = "bookworm"
MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)
PACKAGES = (
    # boot + init
    "systemd", "systemd-sysv", "udev", "dbus", "kmod", "linux-image-cloud-amd64",
    "libnss-myhostname",  # the per-guest hostname resolves without editing /etc/hosts
    # access
    "openssh-server", "openssh-sftp-server", "sudo",
    # what deploys use on a DGX OS host
    "python3", "python3-venv", "python3-pip",
    "docker.io", "apparmor", "iptables",
    "curl", "ca-certificates", "iproute2", "procps", "xz-utils",
)
DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
DISK_SIZE = "6G"
KERNEL_CMDLINE = ("root=/dev/vda rw console=ttyS0 net.ifnames=0 mitigations=off tsc=reliable")


@dataclasses.dataclass(frozen=True)
class Arch:
    """What differs between guest architectures: the Debian architecture and kernel package of the image,
    the QEMU binary and machine, the serial console. A guest's arch is one of ARCHES' keys."""
    name: str  # "x86_64" / "arm64" (also the `--arch` spelling)
    debian: str  # dpkg architecture: amd64 / arm64
    machine: str  # `uname -m` in the guest: x86_64 / aarch64
    kernel_package: str
    qemu: str  # the qemu-system binary
    qemu_package: str  # the Debian package that has it
    machine_args: tuple  # -M ...
    tcg_cpu: str
    cmdline: str  # kernel command line (root, console, ...)


ARCHES: dict = {
    "x86_64": Arch("x86_64", "amd64", "x86_64", "linux-image-cloud-amd64", "qemu-system-x86_64",
                   "qemu-system-x86", (), "max", KERNEL_CMDLINE),
    # arm64: `-M virt` boots Debian's vmlinuz (a plain ARM64 Image) directly, no firmware. There is no cloud
    # kernel flavour for arm64. `-cpu max,pauth-impdef=on`: the architected pointer-authentication algorithm
    # (QARMA5) is very slow to emulate under TCG; the IMPDEF one is cheap and the guest cannot tell.
    "arm64": Arch("arm64", "arm64", "aarch64", "linux-image-arm64", "qemu-system-aarch64",
                  "qemu-system-arm", ("-M", "virt"), "max,pauth-impdef=on",
                  "root=/dev/vda rw console=ttyAMA0 net.ifnames=0 mitigations=off"),
}
_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "x86-64": "x86_64",
                 "arm64": "arm64", "aarch64": "arm64"}
DEFAULT_ARCH = "x86_64"


def parse_arch(value) -> str:
    """A guest architecture name (x86_64/amd64, arm64/aarch64) -> its ARCHES key; VMError otherwise."""
    arch = _ARCH_ALIASES.get(str(value).strip().lower())
    if arch is None:
        raise VMError(f"unknown guest architecture {value!r}: use one of {', '.join(ARCHES)} "
                      f"(aliases: amd64, aarch64)")
    return arch


def parse_arches(spec) -> list:
    """`x86_64,arm64` (or a list) -> one ARCHES key per entry, in order. None -> [DEFAULT_ARCH]."""
    if spec is None:
        return [DEFAULT_ARCH]
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    items = [str(i).strip() for i in items]
    if not items or any(not i for i in items):
        raise VMError(f"--arch: expected a comma-separated list of {', '.join(ARCHES)}, got {spec!r}")
    return [parse_arch(i) for i in items]


def guest_arches(count, arch) -> list:
    """The arch of each guest: one arch for all `count` guests (default 3), or one arch per guest."""
    arches = parse_arches(arch)
    if len(arches) == 1:
        n = 3 if count is None else count
        if n < 1:
            raise VMError("count must be >= 1")
        return arches * n
    if count is not None and count != len(arches):
        raise VMError(f"--count {count} does not match the {len(arches)} architectures given with --arch "
                      f"{','.join(arches)} (one per guest)")
    return arches


def host_arch() -> str:
    import platform
    return _ARCH_ALIASES.get(platform.machine().lower(), platform.machine())

#: mmdebstrap customize hook: $1 = rootfs, $2 = public key to authorize.
CUSTOMIZE_HOOK = r"""#!/bin/sh
set -eu
R="$1"; PUB="$2"

# network: DHCP on every ethernet NIC via systemd-networkd; slirp's DNS
mkdir -p "$R/etc/systemd/network"
cat > "$R/etc/systemd/network/10-dhcp.network" <<'EOF'
[Match]
Name=e*

[Network]
DHCP=yes
EOF
rm -f "$R/etc/resolv.conf"
echo "nameserver 10.0.2.3" > "$R/etc/resolv.conf"

echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$R/etc/fstab"
echo "spark" > "$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"

# per-guest identity: machine-id and SSH host keys are generated at first boot
: > "$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
rm -f "$R"/etc/ssh/ssh_host_*
cat > "$R/etc/systemd/system/specfleet-ssh-hostkeys.service" <<'EOF'
[Unit]
Description=Generate this guest's SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStartPre=/bin/sh -c 'rm -f /etc/ssh/ssh_host_*'
ExecStart=/usr/bin/ssh-keygen -q -t ecdsa -N "" -f /etc/ssh/ssh_host_ecdsa_key
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key

[Install]
RequiredBy=ssh.service
EOF
# RSA host keys take ~25 s to generate under TCG: serve ed25519 + ecdsa only
printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nHostKey /etc/ssh/ssh_host_ecdsa_key\n' \
    > "$R/etc/ssh/sshd_config.d/specfleet-hostkeys.conf"
# no interactive first-boot prompts on the console
ln -sf /dev/null "$R/etc/systemd/system/systemd-firstboot.service"

# the operator user 'spark' (uid 1000, bash, passwordless sudo, not in docker); as on DGX OS,
# root does not log in over SSH: everything privileged goes through sudo
printf 'PermitRootLogin no\n' > "$R/etc/ssh/sshd_config.d/specfleet-no-root.conf"
chroot "$R" useradd --create-home --uid 1000 --user-group --shell /bin/bash \
    --groups sudo spark
chroot "$R" usermod --password '*' spark
install -d -m 700 -o 1000 -g 1000 "$R/home/spark/.ssh"
install -m 600 -o 1000 -g 1000 "$PUB" "$R/home/spark/.ssh/authorized_keys"
echo 'spark ALL=(ALL) NOPASSWD:ALL' > "$R/etc/sudoers.d/spark"
chmod 440 "$R/etc/sudoers.d/spark"

# STAND-IN for the NVIDIA container toolkit (no GPU in a guest): a docker runtime named "nvidia"
# that only runs runc, and the prestart hook binary docker's --gpus needs, doing nothing.
# dockerd (moby v20.10.24, Debian 12's docker.io) daemon/nvidia_linux.go: init() registers the
# "nvidia" --gpus device driver only if exec.LookPath("nvidia-container-runtime-hook") succeeds;
# setNvidiaGPUs then adds an OCI prestart hook {Path: <that path>, Args:
# ["nvidia-container-runtime-hook", "prestart"]} to every --gpus container. runc runs it with the
# container state on stdin; it must exit 0.
mkdir -p "$R/usr/local/bin" "$R/etc/docker"
cat > "$R/usr/local/bin/nvidia-container-runtime-STANDIN" <<'EOF'
#!/bin/sh
# specfleet VM fleet: STAND-IN for nvidia-container-runtime. It is NOT the NVIDIA container
# toolkit and exposes NO GPU: it runs runc unchanged, so that docker has a runtime named
# "nvidia" as on a DGX Spark.
for r in /usr/sbin/runc /usr/bin/runc; do [ -x "$r" ] && exec "$r" "$@"; done
echo "nvidia-container-runtime-STANDIN: runc not found" >&2
exit 127
EOF
cat > "$R/usr/bin/nvidia-container-runtime-hook" <<'EOF'
#!/bin/sh
# specfleet VM fleet: STAND-IN for nvidia-container-runtime-hook (NVIDIA container toolkit).
# It exposes NO GPU and does nothing: docker's --gpus only needs a binary of this name on
# dockerd's PATH and runs it as an OCI prestart hook ("nvidia-container-runtime-hook prestart",
# the container state on stdin). Real Sparks have NVIDIA's hook here.
case "${1:-}" in
  --version|-version|version)
    echo "nvidia-container-runtime-hook STAND-IN (specfleet VM fleet): no GPU, does nothing"
    exit 0 ;;
esac
cat > /dev/null
exit 0
EOF
chmod 755 "$R/usr/local/bin/nvidia-container-runtime-STANDIN" "$R/usr/bin/nvidia-container-runtime-hook"
cat > "$R/etc/docker/daemon.json" <<'EOF'
{
  "runtimes": {
    "nvidia": {"path": "/usr/local/bin/nvidia-container-runtime-STANDIN"}
  }
}
EOF

chroot "$R" systemctl enable systemd-networkd.service ssh.service docker.service \
    specfleet-ssh-hostkeys.service
"""


#: mmdebstrap essential hook of images built under emulation (qemu-user via binfmt_misc): runs after the
#: Essential:yes packages and BEFORE the kernel package is configured. mkinitramfs with the default
#: MODULES=most forks thousands of emulated processes (20+ min measured); MODULES=list with the few modules
#: a `-M virt` guest needs to mount its root (virtio PCI/MMIO, virtio-blk, ext4) and gzip cut that down.
#: Nothing here is a dpkg conffile (initramfs-tools ships conf.d/ and hooks/ empty).
INITRAMFS_HOOK = r"""#!/bin/sh
set -eu
R="$1"
mkdir -p "$R/etc/initramfs-tools/conf.d" "$R/etc/initramfs-tools/hooks"
printf 'MODULES=list\nCOMPRESS=gzip\n' > "$R/etc/initramfs-tools/conf.d/specfleet-vm.conf"
cat > "$R/etc/initramfs-tools/hooks/specfleet-virtio" <<'EOF'
#!/bin/sh
# specfleet VM fleet: the modules a QEMU -M virt guest needs to mount its virtio root disk (MODULES=list)
case "${1:-}" in prereqs) exit 0 ;; esac
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_mmio virtio_blk virtio_net ext4 crc32c_generic; do
  manual_add_modules "$m"
done
for m in virtio_pci virtio_mmio virtio_blk ext4; do
  force_load "$m"
done
EOF
chmod 755 "$R/etc/initramfs-tools/hooks/specfleet-virtio"
"""


def packages(arch: str = DEFAULT_ARCH) -> list:
    """The image's packages for `arch`: PACKAGES with that arch's kernel package."""
    kernel = ARCHES[parse_arch(arch)].kernel_package
    return [kernel if p == ARCHES[DEFAULT_ARCH].kernel_package else p for p in PACKAGES]


def recipe(arch: str = DEFAULT_ARCH) -> dict:
    """Everything that determines the image; its hash keys the cache. The x86_64 recipe has no `arch` key
    (it is the recipe from before arm64 guests existed, so its cached images stay valid); any other
    architecture's recipe names its Debian arch and adds the initramfs hook its emulated build needs."""
    arch = parse_arch(arch)
    r = {
        "recipe_version": RECIPE_VERSION,
        "suite": SUITE,
        "variant": "minbase",
        "mirrors": list(MIRRORS),
        "packages": packages(arch),
        "dpkg_opts": list(DPKG_OPTS),
        "customize_hook": CUSTOMIZE_HOOK,
        "disk_size": DISK_SIZE,
    }
    if arch != DEFAULT_ARCH:
        r.update(arch=ARCHES[arch].debian, essential_hook=INITRAMFS_HOOK)
    return r


def recipe_hash(arch: str = DEFAULT_ARCH) -> str:
    blob = json.dumps(recipe(arch), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


# --------------------------------------------------------------------------- errors


class VMError(RuntimeError):
    """Anything that went wrong bringing up, reaching or tearing down a guest."""


class SSHError(subprocess.CalledProcessError):
    def __str__(self) -> str:  # include what the remote side said
        base = super().__str__()
        err = (self.stderr or "").strip()
        out = (self.output or "").strip()
        tail = "\n".join((err or out).splitlines()[-20:])
        return f"{base}\n{tail}" if tail else base


# --------------------------------------------------------------------------- helpers


def default_workdir() -> Path:
    return Path(os.environ.get("SPECFLEET_VM_DIR") or ".vm")


def default_cache_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_CACHE_DIR") or "~/.cache/specfleet").expanduser()


def _resolve(path, default) -> Path:
    return Path(path if path is not None else default()).expanduser().absolute()


def _run(argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
    log.debug("run: %s", shlex.join(str(a) for a in argv))
    kw.setdefault("check", True)
    return subprocess.run([str(a) for a in argv], **kw)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = Path(path).read_bytes()[-64 * 1024:]
    except OSError as e:
        return f"<no console log: {e}>"
    text = data.decode("utf-8", "replace").replace("\r", "")
    return "\n".join(text.splitlines()[-lines:])


def _free_port(avoid: Iterable[int] = ()) -> int:
    avoid = set(avoid)
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise VMError("could not find a free TCP port on 127.0.0.1")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As QEMU's hostfwd does: connections in TIME_WAIT (left by a guest that was just powered
        # off) must not make the port look busy; a live listener still makes bind() fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pid_is_our_qemu(pid: int, overlay: Path) -> bool:
    """True if pid is a live (non-zombie) QEMU process running `overlay`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state in ("Z", "X"):
        return False
    args = cmdline.split(b"\0")
    needle = f"file={_qesc(overlay)},".encode()
    return b"qemu" in cmdline and any(needle in a for a in args)


def _wait_gone(pid: int, overlay: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_is_our_qemu(pid, overlay):
            return True
        time.sleep(0.1)
    return not _pid_is_our_qemu(pid, overlay)


def _stop_qemu(pid: int, overlay: Path, term_timeout: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL, a QEMU process we started. Returns True if one was stopped."""
    if not _pid_is_our_qemu(pid, overlay):
        return False
    for sig, wait in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if _wait_gone(pid, overlay, wait):
            return True
    raise VMError(f"QEMU pid {pid} ({overlay}) survived SIGKILL")


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    found = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            mnt = line.split()[4].encode().decode("unicode_escape")
            if mnt == str(path) or mnt.startswith(prefix):
                found.append(mnt)
    except OSError:
        pass
    return sorted(found, key=len, reverse=True)


def _safe_rmtree(path: Path) -> None:
    """rmtree that never descends into something still mounted (e.g. a killed
    mmdebstrap's /proc or /dev bind mounts)."""
    path = Path(path)
    if not path.exists():
        return
    for mnt in _mounts_under(path):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    left = _mounts_under(path)
    if left:
        raise VMError(f"refusing to delete {path}: still mounted: {left}")
    shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- image


@dataclasses.dataclass
class ImageInfo:
    dir: Path
    disk: Path
    kernel: Path
    initrd: Path
    key: Path
    recipe_hash: str
    built: bool  # built by this call
    cached: bool  # found in the cache
    seconds: float  # time spent in build_image (build or cache lookup)
    size_bytes: int  # allocated bytes of the sparse disk image
    arch: str = DEFAULT_ARCH

    @property
    def pubkey(self) -> Path:
        return self.key.with_name(self.key.name + ".pub")


_IMAGE_FILES = ("disk.img", "vmlinuz", "initrd", "id_ed25519", "id_ed25519.pub", "recipe.json")


def _image_info(d: Path, h: str, built: bool, seconds: float, arch: str = DEFAULT_ARCH) -> ImageInfo:
    key = d / "id_ed25519"
    with contextlib.suppress(OSError):
        if key.stat().st_mode & 0o077:
            key.chmod(0o600)  # ssh refuses readable keys (e.g. after a CI cache restore)
    disk = d / "disk.img"
    return ImageInfo(
        dir=d, disk=disk, kernel=d / "vmlinuz", initrd=d / "initrd", key=key,
        recipe_hash=h, built=built, cached=not built, seconds=seconds,
        size_bytes=disk.stat().st_blocks * 512, arch=arch,
    )


def _image_complete(d: Path) -> bool:
    return all((d / f).is_file() for f in _IMAGE_FILES)


def _check_emulation(arch: str) -> None:
    """A foreign-arch image is configured through qemu-user: binfmt_misc must know the interpreter."""
    if arch == host_arch():
        return
    machine = ARCHES[arch].machine
    entry = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{machine}"
    if not entry.exists():
        raise VMError(f"building an {arch} image on this {host_arch()} host needs qemu-user through binfmt_misc "
                      f"({entry} is missing): mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc; "
                      f"apt-get install qemu-user-static binfmt-support (tests/install-deps.sh does both)")


def build_image(cache_dir=None, arch: str = DEFAULT_ARCH) -> ImageInfo:
    """Build (or find in the cache) the guest image of `arch` for the current recipe."""
    t0 = time.monotonic()
    arch = parse_arch(arch)
    cache = _resolve(cache_dir, default_cache_dir)
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    h = recipe_hash(arch)
    target = images / h
    if _image_complete(target):
        log.info("image cached: %s", target)
        return _image_info(target, h, built=False, seconds=time.monotonic() - t0, arch=arch)

    with open(images / f".{h}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one builder per recipe; others wait and reuse
        if _image_complete(target):
            log.info("image cached: %s (built concurrently)", target)
            return _image_info(target, h, built=False, seconds=time.monotonic() - t0, arch=arch)
        for stale in images.glob(f".build-{h[:16]}-*"):  # leftovers of interrupted builds
            log.info("removing stale partial build %s", stale)
            _safe_rmtree(stale)
        if target.exists():  # incomplete (should not happen thanks to the rename)
            _safe_rmtree(target)
        if os.geteuid() != 0:
            raise VMError("building the guest image needs root (mmdebstrap + mkfs.ext4 -d "
                          "must preserve file ownership)")
        for tool in ("mmdebstrap", "mkfs.ext4", "ssh-keygen"):
            if not shutil.which(tool):
                raise VMError(f"{tool} not found; install mmdebstrap e2fsprogs openssh-client")
        _check_emulation(arch)

        log.info("building %s guest image %s (Debian %s, %d packages)", arch, h[:12], SUITE, len(PACKAGES))
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{h[:16]}-", dir=images))
        try:
            _build_into(tmp, lock_fd=lockf.fileno(), arch=arch)
            (tmp / "disk.img").chmod(0o444)  # backing file of every overlay: never write it
            tmp.chmod(0o755)  # mkdtemp made it 0700; the private key itself stays 0600
            seconds = time.monotonic() - t0
            meta = dict(recipe(arch), recipe_hash=h, guest_arch=arch, build_seconds=round(seconds, 1),
                        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (tmp / "recipe.json").write_text(json.dumps(meta, indent=2) + "\n")
            os.rename(tmp, target)  # atomic: a half-built image never has the final name
        finally:
            _safe_rmtree(tmp)
    info = _image_info(target, h, built=True, seconds=time.monotonic() - t0, arch=arch)
    log.info("image built in %.0f s: %s (%.0f MiB allocated)", info.seconds, target,
             info.size_bytes / 2**20)
    return info


def _die_with_parent() -> None:
    """preexec_fn: mmdebstrap gets SIGTERM if the builder is killed outright (it then
    winds down after apt finishes; until it exits it holds the inherited build lock, so
    the next builder waits instead of deleting a directory that is still being written)."""
    with contextlib.suppress(Exception):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _build_into(tmp: Path, lock_fd: int, arch: str = DEFAULT_ARCH) -> None:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specfleet-vm",
          "-f", tmp / "id_ed25519"], capture_output=True)
    hook = tmp / "customize.sh"
    hook.write_text(CUSTOMIZE_HOOK)
    hook.chmod(0o755)
    rootfs = tmp / "rootfs"
    extra = []
    essential = recipe(arch).get("essential_hook")
    if essential:
        ehook = tmp / "essential.sh"
        ehook.write_text(essential)
        ehook.chmod(0o755)
        extra.append(f"--essential-hook=sh {shlex.quote(str(ehook))} \"$1\"")
    argv = ["mmdebstrap", "--variant=minbase", "--format=directory",
            f"--architectures={ARCHES[arch].debian}",
            "--include=" + ",".join(packages(arch)),
            '--aptopt=Acquire::Retries "5"',
            *(f"--dpkgopt={o}" for o in DPKG_OPTS), *extra,
            f"--customize-hook=sh {shlex.quote(str(hook))} \"$1\" "
            f"{shlex.quote(str(tmp / 'id_ed25519.pub'))}",
            SUITE, rootfs, *MIRRORS]
    t0 = time.monotonic()
    build_log = tmp / "mmdebstrap.log"
    log.debug("run: %s", shlex.join(str(a) for a in argv))
    with open(build_log, "wb") as out:
        # the build lock is inherited, so it stays held while anything of this build runs
        proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, pass_fds=(lock_fd,),
                                preexec_fn=_die_with_parent, start_new_session=True)
        try:
            proc.wait()
        except BaseException:
            # interrupted: Ctrl-C its whole process group (mmdebstrap, apt, dpkg), so that
            # mmdebstrap stops and unmounts /proc, /sys, /dev/pts in the rootfs before the
            # caller deletes the directory (a lone SIGTERM makes it wait for apt to finish)
            for sig, wait in ((signal.SIGINT, 60), (signal.SIGKILL, 30)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait)
                    break
            raise
    if proc.returncode != 0:
        raise VMError(f"mmdebstrap failed ({proc.returncode}):\n{_tail(build_log, 40)}")
    log.info("mmdebstrap: %.0f s", time.monotonic() - t0)
    boot = rootfs / "boot"
    kernels = sorted(boot.glob("vmlinuz-*"))
    initrds = sorted(boot.glob("initrd.img-*"))
    if len(kernels) != 1 or len(initrds) != 1:
        raise VMError(f"expected one kernel and one initrd in {boot}, got {kernels} {initrds}")
    shutil.copyfile(kernels[0], tmp / "vmlinuz")
    shutil.copyfile(initrds[0], tmp / "initrd")
    # sanity: the hook ran and its effects survived mmdebstrap's cleanup
    if (rootfs / "etc/resolv.conf").read_text().strip() != "nameserver 10.0.2.3":
        raise VMError("customize hook did not leave the static /etc/resolv.conf")
    if not (rootfs / "home/spark/.ssh/authorized_keys").is_file():
        raise VMError("customize hook did not create the spark user")
    if not (rootfs / "usr/bin/nvidia-container-runtime-hook").is_file():
        raise VMError("customize hook did not install the stand-in NVIDIA container toolkit")
    t0 = time.monotonic()
    _run(["mkfs.ext4", "-q", "-F", "-L", "specfleet-root", "-d", rootfs,
          tmp / "disk.img", DISK_SIZE], capture_output=True)
    log.info("mkfs.ext4 -d: %.0f s", time.monotonic() - t0)
    _safe_rmtree(rootfs)
    hook.unlink()
    with contextlib.suppress(FileNotFoundError):
        (tmp / "essential.sh").unlink()
    build_log.unlink()


# --------------------------------------------------------------------------- accel


def _qemu_binary(arch: str = DEFAULT_ARCH) -> str:
    a = ARCHES[parse_arch(arch)]
    q = shutil.which(a.qemu)
    if not q:
        raise VMError(f"{a.qemu} not found; install {a.qemu_package} qemu-utils (tests/install-deps.sh)")
    return q


def default_smp(count: int, arch: str = DEFAULT_ARCH) -> int:
    """vCPUs per guest: host cores // guests, at least 1, at most 2.

    Measured on the 2-core CI machine under TCG, boot until SSH answers and
    `systemctl is-system-running --wait` returns:
      1 guest:  -smp 2 35 s, -smp 1 50 s
      2 guests: -smp 1 49 s, -smp 2 70 s
      3 guests: -smp 1 81 s, -smp 2 93 s
    More vCPU threads than host cores only add contention (MTTCG pays for cross-vCPU
    IPIs, TLB flushes and atomics); one guest on two cores does use both.
    The same rule holds for arm64 guests (always TCG on an x86 host): an emulated aarch64
    vCPU is one host thread like an x86 one, and oversubscribing the host costs the same.
    Override with SPECFLEET_VM_SMP or up(smp=...).
    """
    parse_arch(arch)
    env = os.environ.get("SPECFLEET_VM_SMP")
    if env:
        return max(1, int(env))
    host = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(2, (host or 1) // max(1, count)))


KVM_PROBE_TIMEOUT = 25.0


def _qemu_version(arch: str = DEFAULT_ARCH) -> str:
    out = _run([_qemu_binary(arch), "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "?"


def choose_accel(image: ImageInfo, cache_dir=None) -> str:
    """'tcg' or 'kvm'. KVM only if a probe boot proved it works on this host (cached). A guest of
    another architecture than the host's (arm64 on x86_64) is always TCG: there is nothing to probe."""
    if image.arch != host_arch():
        return "tcg"
    forced = (os.environ.get("SPECFLEET_VM_ACCEL") or "auto").lower()
    if forced in ("tcg", "kvm"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    cache = _resolve(cache_dir, default_cache_dir)
    verdict_file = cache / "kvm-probe.json"
    key = {"qemu": _qemu_version(image.arch), "host_kernel": os.uname().release,
           "recipe_hash": image.recipe_hash}
    with contextlib.suppress(OSError, ValueError):
        v = json.loads(verdict_file.read_text())
        if v.get("key") == key:
            log.info("KVM probe (cached): %s", "works" if v["kvm_works"] else "fails -> TCG")
            return "kvm" if v["kvm_works"] else "tcg"
    t0 = time.monotonic()
    ok, why = _probe_kvm(image, cache)
    seconds = time.monotonic() - t0
    log.info("KVM probe: %s in %.1f s (%s)", "works" if ok else "fails -> TCG", seconds, why)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = verdict_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "kvm_works": ok, "reason": why,
                               "probe_seconds": round(seconds, 1)}, indent=2) + "\n")
    os.replace(tmp, verdict_file)
    return "kvm" if ok else "tcg"


def _probe_kvm(image: ImageInfo, cache: Path) -> tuple[bool, str]:
    """Boot the image under KVM for at most KVM_PROBE_TIMEOUT seconds; works == SSH answers."""
    with tempfile.TemporaryDirectory(prefix="kvm-probe-", dir=cache) as td:
        td = Path(td)
        overlay = td / "probe.qcow2"
        _run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", image.disk, "-F", "raw",
              overlay], capture_output=True)
        port = _free_port()
        guest = Guest(name="kvm-probe", port=port, overlay=overlay, pidfile=td / "probe.pid",
                      console_log=td / "console.log", key_path=image.key, argv=[], arch=image.arch)
        argv = _qemu_argv(guest, image.kernel, image.initrd, memory_mb=1024, smp=1,
                          accel="kvm", hostname="kvm-probe", daemonize=False)
        errf = open(td / "stderr.log", "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=errf, stderr=errf,
                                start_new_session=True)
        try:
            started = time.monotonic()
            deadline = started + KVM_PROBE_TIMEOUT
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    return False, f"qemu exited {proc.returncode}: {_tail(td / 'stderr.log', 3)}"
                err = (td / "stderr.log").read_bytes()
                if b"KVM internal error" in err or b"emulation failure" in err:
                    return False, "KVM internal error (emulation failure)"
                console = td / "console.log"
                if time.monotonic() - started > 10 and (
                        not console.exists() or console.stat().st_size == 0):
                    return False, "guest printed nothing on its console within 10 s (hung)"
                r = guest.ssh("true", check=False, timeout=5, connect_timeout=3, user=OPERATOR)
                if r.returncode == 0:
                    return True, "guest answered SSH"
                time.sleep(0.5)
            return False, f"no SSH within {KVM_PROBE_TIMEOUT:.0f} s"
        finally:
            proc.kill()
            proc.wait()
            errf.close()


# --------------------------------------------------------------------------- guests


def _qesc(path) -> str:
    """A path inside a QEMU option string (commas are doubled)."""
    return str(path).replace(",", ",,")


def _qemu_argv(g: "Guest", kernel: Path, initrd: Path, memory_mb: int, smp: int, accel: str,
               hostname: str, daemonize: bool = True) -> list[str]:
    a = ARCHES[parse_arch(g.arch)]
    if accel == "kvm":
        accel_args = ["-accel", "kvm", "-cpu", "host"]
    else:
        accel_args = ["-accel", "tcg,thread=multi", "-cpu", a.tcg_cpu]
    argv = [
        _qemu_binary(a.name), "-name", g.name, *a.machine_args, *accel_args,
        "-smp", str(smp), "-m", str(memory_mb),
        "-nodefaults", "-no-user-config", "-display", "none", "-monitor", "none",
        # append: a guest booted again after poweroff() keeps the earlier boots' console
        "-chardev", f"file,id=con0,path={_qesc(g.console_log)},append=on",
        "-serial", "chardev:con0",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", f"{a.cmdline} systemd.hostname={hostname}",
        "-drive", f"file={_qesc(g.overlay)},format=qcow2,if=virtio",
        "-netdev", f"user,id=n0,hostname={hostname},hostfwd=tcp:127.0.0.1:{g.port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        "-device", "virtio-rng-pci",
        "-pidfile", str(g.pidfile),
    ]
    if daemonize:
        argv.append("-daemonize")
    return argv


_SSH_OPTS = (
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
    "-o", "UserKnownHostsFile=/dev/null", "-o", "GlobalKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes",
    "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=8",
)


#: The account the fleet logs in as (root SSH is disabled in the guests, as on DGX OS).
OPERATOR = "spark"


def _as_user(user: str, cmd: str) -> str:
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

    # -- state
    @property
    def pid(self) -> int | None:
        pid = _read_pid(self.pidfile)
        return pid if pid and _pid_is_our_qemu(pid, self.overlay) else None

    def is_running(self) -> bool:
        return self.pid is not None

    def to_json(self) -> dict:
        return {"name": self.name, "port": self.port, "pidfile": str(self.pidfile),
                "overlay": str(self.overlay), "console_log": str(self.console_log),
                "key_path": str(self.key_path), "argv": self.argv,
                "boot_timeout": self.boot_timeout, "arch": self.arch}

    @classmethod
    def from_json(cls, d: dict) -> "Guest":
        return cls(name=d["name"], port=int(d["port"]), overlay=Path(d["overlay"]),
                   pidfile=Path(d["pidfile"]), console_log=Path(d["console_log"]),
                   key_path=Path(d["key_path"]), argv=list(d.get("argv", [])),
                   boot_timeout=float(d.get("boot_timeout", 900.0)),
                   arch=parse_arch(d.get("arch") or DEFAULT_ARCH))

    # -- remote access
    def _ssh_base(self, connect_timeout: int = 20) -> list[str]:
        return ["ssh", *_SSH_OPTS, "-o", f"ConnectTimeout={connect_timeout}",
                "-i", str(self.key_path), "-p", str(self.port)]

    def ssh(self, cmd: str, check: bool = True, timeout: float = 600, user: str = "root",
            input: bytes | None = None, connect_timeout: int = 20) -> subprocess.CompletedProcess:
        """Run a shell command on the guest as `user` (root by default); stdout/stderr are
        returned as text. The guest is reached as the operator OPERATOR (root cannot log in,
        as on DGX OS); another user's command runs through `sudo -n -H [-u user] sh -c CMD`."""
        remote = _as_user(user, cmd)
        argv = [*self._ssh_base(connect_timeout), f"{OPERATOR}@{self.host}", remote]
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
        argv = [*self._ssh_base(), f"{OPERATOR}@{self.host}", _as_user(user, script)]
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
        argv = [*self._ssh_base(), f"{OPERATOR}@{self.host}", _as_user(user, f"cat {shlex.quote(remote)}")]
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
            if not _wait_gone(pid, self.overlay, 10):
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
                          f"{_tail(self.console_log)}")
        log.debug("%s: qemu pid %s, ssh port %d", self.name, self.pid, self.port)

    def boot(self, wait: bool = True) -> None:
        """Start the guest again from its overlay on the same port; optionally wait for it."""
        # Connections the dead QEMU left in TIME_WAIT hold the port for up to a minute on some
        # kernels (even with SO_REUSEADDR): wait them out before giving up.
        deadline = time.monotonic() + 90
        while not _port_free(self.port):
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
                           f"--- tail of {self.console_log} ---\n{_tail(self.console_log)}")

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


# --------------------------------------------------------------------------- fleet


@dataclasses.dataclass
class Fleet:
    guests: list[Guest]
    workdir: Path
    inventory_path: Path
    key_path: Path
    timings: dict = dataclasses.field(default_factory=dict)

    def __getitem__(self, name: str) -> Guest:
        for g in self.guests:
            if g.name == name:
                return g
        raise KeyError(name)

    def _parallel(self, fn, guests: Sequence[Guest] | None = None) -> dict:
        guests = list(guests or self.guests)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(guests))) as ex:
            futs = {g.name: ex.submit(fn, g) for g in guests}
            return {name: f.result() for name, f in futs.items()}

    def ssh_all(self, cmd: str, **kw) -> dict[str, subprocess.CompletedProcess]:
        return self._parallel(lambda g: g.ssh(cmd, **kw))

    def load_image(self, tarball: Path, tag: str, changes: Sequence[str] = (),
                   guests: Sequence[Guest] | None = None) -> dict[str, float]:
        """Stream a rootfs tarball into `docker import - TAG` on every guest (or on `guests`; a tarball
        holds one architecture's binaries) in parallel, over the operator's SSH session through sudo (one
        pass: no copy of the tarball on the guest's disk), with `--change` instructions. Returns seconds
        per guest."""
        tarball = Path(tarball)
        import_cmd = " ".join(["docker import", *(f"--change {shlex.quote(c)}" for c in changes),
                               "-", shlex.quote(tag)])
        remote = _as_user("root", import_cmd)

        def one(g: Guest) -> float:
            t0 = time.monotonic()
            argv = [*g._ssh_base(), f"{OPERATOR}@{g.host}", remote]
            with open(tarball, "rb") as f:
                try:
                    p = subprocess.run(argv, stdin=f, capture_output=True, timeout=1800)
                except subprocess.TimeoutExpired as e:
                    raise VMError(f"{g.name}: docker import of {tarball} as {tag} timed out after 1800 s") from e
            if p.returncode != 0:
                raise VMError(f"{g.name}: docker import of {tarball} as {tag} failed (rc={p.returncode}): "
                              f"{p.stderr.decode('utf-8', 'replace').strip()[-2000:]}")
            return time.monotonic() - t0

        return self._parallel(one, guests)


def _fleet_json(workdir: Path) -> Path:
    return workdir / "fleet.json"


def _write_fleet_json(workdir: Path, guests: Sequence[Guest], key: Path, timings: dict,
                      image: ImageInfo | None = None, images: dict | None = None) -> None:
    images = images or ({image.arch: image} if image else {})
    data = {"workdir": str(workdir), "key_path": str(key),
            "inventory_path": str(workdir / "inventory.yml"),
            "image": str(image.dir) if image else None,
            "images": {arch: str(info.dir) for arch, info in images.items()},
            "guests": [g.to_json() for g in guests], "timings": timings}
    tmp = _fleet_json(workdir).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, _fleet_json(workdir))


def write_inventory(path: Path, guests: Sequence[Guest], key: Path) -> None:
    """The fleet's inventory: every guest in group vm_fleet, and in vm_<arch> (vm_x86_64, vm_arm64) for
    its architecture, so a run can be limited to one arch (`--limit vm_arm64`). No per-host data beyond
    the connection: the deploy reads a host's architecture from the host itself, as on real Sparks."""
    children: dict = {"vm_fleet": {"hosts": {
        g.name: {"ssh_hostname": g.host, "ssh_port": g.port} for g in guests}}}
    for arch in ARCHES:
        names = [g.name for g in guests if g.arch == arch]
        if names:
            children[f"vm_{arch}"] = {"hosts": {n: {} for n in names}}
    inv = {"all": {
        # as on DGX OS: an operator account with password-less sudo, no root SSH
        "vars": {"ssh_user": OPERATOR, "_sudo": True, "ssh_key": str(key),
                 "ssh_known_hosts_file": "/dev/null", "ssh_strict_host_key_checking": "no"},
        "children": children,
    }}
    tmp = path.with_suffix(".yml.tmp")
    tmp.write_text(yaml.safe_dump(inv, sort_keys=False, default_flow_style=False))
    os.replace(tmp, path)


def load(workdir=None) -> Fleet:
    """Re-attach to a fleet brought up (possibly by another process) in `workdir`."""
    workdir = _resolve(workdir, default_workdir)
    try:
        data = json.loads(_fleet_json(workdir).read_text())
    except FileNotFoundError:
        raise VMError(f"no fleet in {workdir} (no fleet.json); run `specfleet vm up`") from None
    return Fleet(guests=[Guest.from_json(g) for g in data["guests"]], workdir=workdir,
                 inventory_path=Path(data["inventory_path"]), key_path=Path(data["key_path"]),
                 timings=data.get("timings", {}))


def up(count: int | None = None, workdir=None, cache_dir=None, memory_mb: int = 2048,
       smp: int | None = None, accel: str | None = None, arch=None) -> Fleet:
    """Build/reuse the image(s), boot the guests, wait for SSH + systemd, write the inventory.

    `arch`: one architecture for all `count` guests (default x86_64, count default 3), or a list /
    comma-separated string with one architecture per guest (`"x86_64,arm64"`). One image per
    architecture; all guests use the same SSH key (the first image's)."""
    arches = guest_arches(count, arch)
    count = len(arches)
    workdir = _resolve(workdir, default_workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if _fleet_json(workdir).exists():
        old = load(workdir)
        alive = [g.name for g in old.guests if g.is_running()]
        if alive:
            raise VMError(f"a fleet is already running in {workdir} ({', '.join(alive)}); "
                          f"run `specfleet vm down --workdir {workdir}` first")
        down(workdir)  # stale files of a dead fleet

    timings: dict = {}
    images: dict[str, ImageInfo] = {}
    for a in dict.fromkeys(arches):  # each architecture once, in the order given
        images[a] = build_image(cache_dir, arch=a)
    first = images[arches[0]]
    timings["image_cached"] = all(i.cached for i in images.values())
    built = sum(i.seconds for i in images.values() if i.built)
    timings["image_build_s" if built else "image_lookup_s"] = round(
        built or sum(i.seconds for i in images.values()), 1)
    timings["image_size_bytes"] = sum(i.size_bytes for i in images.values())
    if len(images) > 1 or first.arch != DEFAULT_ARCH:
        timings["images"] = {a: {"cached": i.cached, "seconds": round(i.seconds, 1), "dir": str(i.dir)}
                             for a, i in images.items()}
    t0 = time.monotonic()
    accels = {a: (accel or choose_accel(i, cache_dir)) for a, i in images.items()}
    timings["accel_choice_s"] = round(time.monotonic() - t0, 1)
    smps = {a: smp or default_smp(count, a) for a in images}
    timings.update(accel=accels[first.arch] if len(set(accels.values())) == 1 else accels,
                   smp=smps[first.arch] if len(set(smps.values())) == 1 else smps,
                   count=count, memory_mb=memory_mb)
    if len(images) > 1 or first.arch != DEFAULT_ARCH:
        timings["arches"] = list(arches)
    log.info("booting %d guest(s) (%s): accel=%s smp=%s memory=%d MiB", count, ",".join(arches),
             timings["accel"], timings["smp"], memory_mb)

    # one key for the fleet (each image has its own; the guests of other arches get it authorized)
    key = first.key
    guests: list[Guest] = []
    used: set[int] = set()
    for i, a in enumerate(arches, start=1):
        name = f"spark-{i}"
        overlay = workdir / f"{name}.qcow2"
        with contextlib.suppress(FileNotFoundError):
            overlay.unlink()
        _run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", images[a].disk, "-F", "raw",
              overlay], capture_output=True)
        g = Guest(name=name, port=0, overlay=overlay, pidfile=workdir / f"{name}.pid",
                  console_log=workdir / f"{name}.console.log", key_path=images[a].key, argv=[], arch=a)
        with contextlib.suppress(FileNotFoundError):
            g.console_log.unlink()
        guests.append(g)
    _write_fleet_json(workdir, guests, key, timings, first, images)

    t_boot = time.monotonic()
    per_guest: dict[str, float] = {}
    try:
        for g in guests:
            img = images[g.arch]
            for attempt in range(5):  # a port may be grabbed between probe and bind
                g.port = _free_port(avoid=used)
                g.argv = _qemu_argv(g, img.kernel, img.initrd, memory_mb, smps[g.arch], accels[g.arch],
                                    hostname=g.name)
                try:
                    g.start()
                    break
                except VMError as e:
                    port_clash = "hostfwd" in str(e) or "forwarding" in str(e)
                    if not port_clash or attempt == 4:
                        raise
            used.add(g.port)
            _write_fleet_json(workdir, guests, key, timings, first, images)
        states = _wait_all(guests, seconds=per_guest)
        if len({g.key_path for g in guests}) > 1:
            _unify_keys(guests, key)
    except BaseException:
        log.error("bringing up the fleet failed; tearing down (console logs kept in %s)", workdir)
        with contextlib.suppress(Exception):
            down(workdir)
        raise
    timings["boot_s"] = round(time.monotonic() - t_boot, 1)
    timings["boot_s_per_guest"] = {n: round(v, 1) for n, v in per_guest.items()}
    timings["states"] = states
    log.info("%d guest(s) up in %.0f s: %s", count, timings["boot_s"],
             ", ".join(f"{g.name}({g.arch})=127.0.0.1:{g.port}" for g in guests))

    inventory = workdir / "inventory.yml"
    write_inventory(inventory, guests, key)
    _write_fleet_json(workdir, guests, key, timings, first, images)
    return Fleet(guests=guests, workdir=workdir, inventory_path=inventory,
                 key_path=key, timings=timings)


def _unify_keys(guests: Sequence[Guest], key: Path) -> None:
    """A mixed fleet: authorize the fleet key (the first image's) for the operator on the guests of the
    other images, and switch them to it, so that the inventory has a single ssh_key."""
    pub = Path(str(key) + ".pub").read_bytes()
    for g in guests:
        if g.key_path != key:
            g.ssh(f"cat >> ~{OPERATOR}/.ssh/authorized_keys", user=OPERATOR, input=pub)
            g.key_path = key
            g.ssh("true", user=OPERATOR)


def _wait_all(guests: Sequence[Guest], seconds: dict | None = None) -> dict[str, str]:
    results: dict[str, str] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def one(g: Guest) -> None:
        t0 = time.monotonic()
        try:
            state = g.wait_ready()
            with lock:
                results[g.name] = state
                if seconds is not None:
                    seconds[g.name] = time.monotonic() - t0
            log.info("%s (%s) ready (%s) after %.0f s", g.name, g.arch, state, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - collected and re-raised below
            with lock:
                errors.append(str(e))

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in guests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise VMError("\n\n".join(errors))
    return results


def down(workdir=None) -> None:
    """Stop the QEMU processes this fleet started and remove its runtime files.
    Console logs are kept. Safe to run twice and when nothing is up."""
    workdir = _resolve(workdir, default_workdir)
    if not workdir.is_dir():
        return
    entries: dict[Path, Path] = {}  # pidfile -> overlay
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        for g in json.loads(_fleet_json(workdir).read_text())["guests"]:
            entries[Path(g["pidfile"])] = Path(g["overlay"])
    for pf in workdir.glob("*.pid"):  # e.g. fleet.json lost: our naming convention
        entries.setdefault(pf, pf.with_suffix(".qcow2"))
    for pidfile, overlay in entries.items():
        pid = _read_pid(pidfile)
        if pid is not None:
            if _stop_qemu(pid, overlay):
                log.info("stopped QEMU pid %d (%s)", pid, overlay.name)
            elif Path(f"/proc/{pid}").exists():
                log.debug("pid %d is not our QEMU for %s; left alone", pid, overlay)
        for p in (pidfile, overlay):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    for name in ("fleet.json", "fleet.json.tmp", "inventory.yml", "inventory.yml.tmp"):
        with contextlib.suppress(FileNotFoundError):
            (workdir / name).unlink()


# --------------------------------------------------------------------------- CLI


def _setup_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s vm: %(message)s",
                            datefmt="%H:%M:%S")


@contextlib.contextmanager
def _exit_on_sigterm():
    """CI cancels with SIGTERM: inside this block it is SystemExit, so `finally` blocks run (partial image builds
    are removed, a half-started fleet is torn down). The previous handler comes back afterwards: a command invoked
    in-process (click's CliRunner in a test run) must not leave its handler behind in the caller's process."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_workdir_opt = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), envvar="SPECFLEET_VM_DIR",
    default=".vm", show_default=True, help="Where overlays, logs, fleet.json and "
    "inventory.yml live (env SPECFLEET_VM_DIR).")
_cache_opt = click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path),
    envvar="SPECFLEET_CACHE_DIR", default="~/.cache/specfleet", show_default=True,
    help="Image cache (env SPECFLEET_CACHE_DIR).")

cli = click.Group("vm", help="A fleet of QEMU VMs standing in for DGX Spark hosts (CI).")


def _arch_option(ctx, param, value):
    """--arch: one architecture, or a comma-separated list (one per guest); bad input is one line."""
    if value is None:
        return None
    try:
        return parse_arches(value)
    except VMError as e:
        raise click.BadParameter(str(e)) from None


@cli.command("up")
@click.option("--count", type=click.IntRange(1, 16), default=None,
              help="Number of guests [default: 3, or one per --arch entry].")
@click.option("--arch", "arch", default=None, callback=_arch_option, metavar="ARCH[,ARCH...]",
              help="Guest architecture: x86_64 (default) or arm64 (TCG-emulated, qemu-system-aarch64 "
                   "-M virt); a comma-separated list gives one architecture per guest, e.g. x86_64,arm64.")
@_workdir_opt
@click.option("--memory", "memory_mb", type=click.IntRange(256), default=2048,
              show_default=True, help="Memory per guest in MiB.")
@_cache_opt
@click.option("--smp", type=click.IntRange(1, 64), default=None,
              help="vCPUs per guest (default: chosen from host cores and --count).")
def up_cmd(count: int | None, arch: list | None, workdir: Path, memory_mb: int, cache_dir: Path,
           smp: int | None) -> None:
    """Boot COUNT guests and write WORKDIR/inventory.yml."""
    _setup_logging()
    try:
        arches = guest_arches(count, arch)
    except VMError as e:
        raise click.UsageError(str(e)) from None
    try:
        with _exit_on_sigterm():
            fleet = up(count=len(arches), workdir=workdir, cache_dir=Path(cache_dir).expanduser(),
                       memory_mb=memory_mb, smp=smp, arch=arches)
    except VMError as e:
        raise click.ClickException(str(e)) from None
    for g in fleet.guests:
        click.echo(f"{g.name}\t127.0.0.1:{g.port}\t{g.arch}")
    click.echo(f"inventory: {fleet.inventory_path}")
    click.echo(f"log in:    {fleet.guests[0].login_command()}   (operator {OPERATOR}; sudo -i for root)")


@cli.command("down")
@_workdir_opt
def down_cmd(workdir: Path) -> None:
    """Stop the fleet's guests and remove overlays, pid files and fleet.json."""
    _setup_logging()
    try:
        down(workdir)
    except VMError as e:
        raise click.ClickException(str(e)) from None


@cli.command("build-image")
@_cache_opt
@click.option("--arch", "arch", default=None, callback=_arch_option, metavar="ARCH[,ARCH...]",
              help="x86_64 (default) and/or arm64; one image per architecture.")
def build_image_cmd(cache_dir: Path, arch: list | None) -> None:
    """Build (or find cached) the guest image(s) and print the directory of each."""
    _setup_logging()
    try:
        with _exit_on_sigterm():
            for a in dict.fromkeys(arch or [DEFAULT_ARCH]):
                info = build_image(Path(cache_dir).expanduser(), arch=a)
                click.echo(str(info.dir))
    except VMError as e:
        raise click.ClickException(str(e)) from None


@cli.command("status")
@_workdir_opt
def status_cmd(workdir: Path) -> None:
    """Show the fleet's guests and whether their QEMU is running."""
    try:
        fleet = load(workdir)
    except VMError as e:
        raise click.ClickException(str(e)) from None
    for g in fleet.guests:
        state = f"running (pid {g.pid})" if g.is_running() else "stopped"
        click.echo(f"{g.name}\t127.0.0.1:{g.port}\t{g.arch}\t{state}")
