"""Guest architectures: what differs between an x86_64 and an arm64 guest (Debian arch, kernel package, QEMU
binary and machine, serial console), `--arch` parsing, and the architecture of this controller."""

from __future__ import annotations

import dataclasses
import platform
import shutil

from .errors import VMError

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
    return _ARCH_ALIASES.get(platform.machine().lower(), platform.machine())


def qemu_binary(arch: str = DEFAULT_ARCH) -> str:
    """The path of the qemu-system binary that boots `arch` guests; VMError naming its package if missing."""
    a = ARCHES[parse_arch(arch)]
    q = shutil.which(a.qemu)
    if not q:
        raise VMError(f"{a.qemu} not found; install {a.qemu_package} qemu-utils (tests/install-deps.sh)")
    return q
