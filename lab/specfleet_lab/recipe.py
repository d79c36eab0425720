"""The guest image's recipe: Debian suite, mirrors, packages, dpkg options, disk size and the mmdebstrap hooks.
Everything here determines the image, and its hash keys the image cache: the hooks are shell files in
`hooks/` (run by mmdebstrap, linted with `sh -n` by the unit tests), and their bytes are part of the hash, so
editing one rebuilds the image."""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

from .arch import ARCHES, DEFAULT_ARCH, host_arch, parse_arch

#: Bump to force a rebuild of every cached image (changes the recipe hash).
RECIPE_VERSION = 2

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
    # what a deploy installs from the distribution where it is missing: the hosts have no apt lists, and container
    # hosts no route to a mirror (docs/dev/lab.md); in the image, disabled, as absent until a deploy enables them
    "earlyoom",  # a serving Spark's
    "haproxy",  # a gateway's
    "docker-registry", "skopeo",  # a mirror host's image registry and its fetch (image_mirror)
)
#: What a two-Spark pair's guests add (tests/vm/test_pair*.py, `up(pair_link=True)`): DGX OS has both; the deploy
#: applies the CX-7 link with `netplan try` and its preflight pings across it. An image of its own (its own recipe
#: hash), so the session fleet's guests boot the image without them.
PAIR_PACKAGES = ("netplan.io", "iputils-ping")
DPKG_OPTS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
DISK_SIZE = "6G"


def _hook(name: str) -> str:
    return (resources.files(__package__) / "hooks" / name).read_text(encoding="utf-8")


#: mmdebstrap customize hook (hooks/customize.sh): $1 = rootfs, $2 = public key to authorize. Network, per-guest
#: identity, the operator user `spark` (no root SSH) and the stand-in NVIDIA container toolkit.
CUSTOMIZE_HOOK = _hook("customize.sh")

#: The container output (hooks/container.sh): run on the rootfs after the disk image was made from it, with the
#: files of container_files/ copied over it first (the ifnames unit, the runc wrapper). Made for the machine's own
#: architecture only.
CONTAINER_HOOK = _hook("container.sh")
CONTAINER_FILES = resources.files(__package__) / "container_files"


def container_files() -> dict[str, str]:
    """container_files/ as {path: "mode content"}: what the recipe hashes of it, and what the build copies (nothing
    else of that directory, e.g. a __pycache__)."""
    root = Path(str(CONTAINER_FILES))
    return {str(f.relative_to(root)): f"{f.stat().st_mode & 0o777:o} {f.read_text(encoding='utf-8')}"
            for f in sorted(root.rglob("*")) if f.is_file() and "__pycache__" not in f.parts}


#: mmdebstrap essential hook (hooks/initramfs.sh) of images built under emulation (qemu-user via binfmt_misc):
#: runs after the Essential:yes packages and BEFORE the kernel package is configured. mkinitramfs with the default
#: MODULES=most forks thousands of emulated processes (20+ min measured); MODULES=list with the few modules
#: a `-M virt` guest needs to mount its root (virtio PCI/MMIO, virtio-blk, ext4) and gzip cut that down.
#: Nothing here is a dpkg conffile (initramfs-tools ships conf.d/ and hooks/ empty).
INITRAMFS_HOOK = _hook("initramfs.sh")


def packages(arch: str = DEFAULT_ARCH, pair: bool = False) -> list:
    """The image's packages for `arch`: PACKAGES with that arch's kernel package (+ PAIR_PACKAGES for a pair's)."""
    kernel = ARCHES[parse_arch(arch)].kernel_package
    return [kernel if p == ARCHES[DEFAULT_ARCH].kernel_package else p
            for p in PACKAGES + (PAIR_PACKAGES if pair else ())]


def makes_container_output(arch: str) -> bool:
    """Whether an image of `arch` gets a container output: only the machine's own architecture runs as containers
    (an emulated one runs as QEMU guests only)."""
    return parse_arch(arch) == host_arch()


def recipe(arch: str = DEFAULT_ARCH, pair: bool = False) -> dict:
    """Everything that determines the image (both outputs: the disk and the container image); its hash keys the
    cache. An architecture other than x86_64 names its Debian arch and adds the initramfs hook its emulated build
    needs. The container hook and files are in it only for the machine's own architecture, the only one whose build
    makes a container output: a change to them leaves an emulated architecture's image cached. `pair`: the image of
    a pair's hosts, with PAIR_PACKAGES."""
    arch = parse_arch(arch)
    r = {
        "recipe_version": RECIPE_VERSION,
        "suite": SUITE,
        "variant": "minbase",
        "mirrors": list(MIRRORS),
        "packages": packages(arch, pair),
        "dpkg_opts": list(DPKG_OPTS),
        "customize_hook": CUSTOMIZE_HOOK,
        "disk_size": DISK_SIZE,
    }
    if makes_container_output(arch):
        r.update(container_hook=CONTAINER_HOOK, container_files=container_files())
    if arch != DEFAULT_ARCH:
        r.update(arch=ARCHES[arch].debian, essential_hook=INITRAMFS_HOOK)
    if pair:
        r["pair"] = True
    return r


def recipe_hash(arch: str = DEFAULT_ARCH, pair: bool = False) -> str:
    blob = json.dumps(recipe(arch, pair), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()
