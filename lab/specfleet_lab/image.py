"""The host image: built once per recipe hash, from one mmdebstrap rootfs, into its two outputs in the cache
(`<cache>/images/<hash>/`): the QEMU disk (disk.img by `mkfs.ext4 -d`, vmlinuz, initrd) and, for the machine's own
architecture, the container image (container.tar: the same tree with the container hook's changes, without the
kernel); beside them the fleet's SSH key and recipe.json. Under a per-recipe lock, so that concurrent builders wait
and reuse. A build is renamed into place only when complete; an interrupted one is removed (also by the next
builder)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .arch import ARCHES, DEFAULT_ARCH, host_arch, parse_arch
from .errors import VMError
from .local import default_cache_dir, resolve, run, safe_rmtree, tail
from .recipe import (
    CONTAINER_HOOK,
    CUSTOMIZE_HOOK,
    DISK_SIZE,
    DPKG_OPTS,
    MIRRORS,
    SUITE,
    container_files,
    makes_container_output,
    packages,
    recipe,
    recipe_hash,
)

log = logging.getLogger(__name__)


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

    @property
    def container_tar(self) -> Path:
        """The container output (the machine's own architecture only)."""
        return self.dir / CONTAINER_TAR


IMAGE_FILES = ("disk.img", "vmlinuz", "initrd", "id_ed25519", "id_ed25519.pub", "recipe.json")
CONTAINER_TAR = "container.tar"
#: what the container image leaves out of the rootfs: the kernel and its modules (a container runs the machine's)
CONTAINER_EXCLUDES = ("./boot", "./lib/modules", "./usr/lib/modules", "./lost+found", "./vmlinuz*", "./initrd.img*")


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


def _image_complete(d: Path, arch: str) -> bool:
    return all((d / f).is_file() for f in IMAGE_FILES + ((CONTAINER_TAR,) if makes_container_output(arch) else ()))


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


def build_image(cache_dir=None, arch: str = DEFAULT_ARCH, pair: bool = False) -> ImageInfo:
    """Build (or find in the cache) the guest image of `arch` for the current recipe (`pair`: a pair's guests')."""
    t0 = time.monotonic()
    arch = parse_arch(arch)
    cache = resolve(cache_dir, default_cache_dir)
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    h = recipe_hash(arch, pair)
    target = images / h
    if _image_complete(target, arch):
        log.info("image cached: %s", target)
        return _image_info(target, h, built=False, seconds=time.monotonic() - t0, arch=arch)

    with open(images / f".{h}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # one builder per recipe; others wait and reuse
        if _image_complete(target, arch):
            log.info("image cached: %s (built concurrently)", target)
            return _image_info(target, h, built=False, seconds=time.monotonic() - t0, arch=arch)
        _check_builder(images, h, target, arch)
        log.info("building %s guest image %s (Debian %s, %d packages)", arch, h[:12], SUITE, len(packages(arch, pair)))
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{h[:16]}-", dir=images))
        try:
            _build_into(tmp, lock_fd=lockf.fileno(), arch=arch, pair=pair)
            (tmp / "disk.img").chmod(0o444)  # backing file of every overlay: never write it
            tmp.chmod(0o755)  # mkdtemp made it 0700; the private key itself stays 0600
            seconds = time.monotonic() - t0
            meta = dict(recipe(arch, pair), recipe_hash=h, guest_arch=arch, build_seconds=round(seconds, 1),
                        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (tmp / "recipe.json").write_text(json.dumps(meta, indent=2) + "\n")
            os.rename(tmp, target)  # atomic: a half-built image never has the final name
        finally:
            safe_rmtree(tmp)
    info = _image_info(target, h, built=True, seconds=time.monotonic() - t0, arch=arch)
    log.info("image built in %.0f s: %s (%.0f MiB allocated)", info.seconds, target,
             info.size_bytes / 2**20)
    return info


def _check_builder(images: Path, h: str, target: Path, arch: str) -> None:
    """Under the build lock, before a build: leftovers of interrupted builds go; root and the tools are here."""
    for stale in images.glob(f".build-{h[:16]}-*"):  # leftovers of interrupted builds
        log.info("removing stale partial build %s", stale)
        safe_rmtree(stale)
    if target.exists():  # incomplete (should not happen thanks to the rename)
        safe_rmtree(target)
    if os.geteuid() != 0:
        raise VMError("building the guest image needs root (mmdebstrap + mkfs.ext4 -d "
                      "must preserve file ownership)")
    for tool in ("mmdebstrap", "mkfs.ext4", "ssh-keygen"):
        if not shutil.which(tool):
            raise VMError(f"{tool} not found; install mmdebstrap e2fsprogs openssh-client")
    _check_emulation(arch)


def _die_with_parent() -> None:
    """preexec_fn: mmdebstrap gets SIGTERM if the builder is killed outright (it then
    winds down after apt finishes; until it exits it holds the inherited build lock, so
    the next builder waits instead of deleting a directory that is still being written)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _build_into(tmp: Path, lock_fd: int, arch: str = DEFAULT_ARCH, pair: bool = False) -> None:
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specfleet-vm",
         "-f", tmp / "id_ed25519"], capture_output=True)
    rootfs = tmp / "rootfs"
    argv = _mmdebstrap_argv(tmp, rootfs, arch, pair)
    t0 = time.monotonic()
    build_log = tmp / "mmdebstrap.log"
    _run_mmdebstrap(argv, build_log, lock_fd)
    log.info("mmdebstrap: %.0f s", time.monotonic() - t0)
    _check_rootfs(tmp, rootfs)
    t0 = time.monotonic()
    run(["mkfs.ext4", "-q", "-F", "-L", "specfleet-root", "-d", rootfs,
         tmp / "disk.img", DISK_SIZE], capture_output=True)
    log.info("mkfs.ext4 -d: %.0f s", time.monotonic() - t0)
    if makes_container_output(arch):
        _container_output(tmp, rootfs)
    safe_rmtree(rootfs)
    (tmp / "customize.sh").unlink()
    with contextlib.suppress(FileNotFoundError):
        (tmp / "essential.sh").unlink()
    build_log.unlink()


def _container_output(tmp: Path, rootfs: Path) -> None:
    """container.tar: the rootfs after the disk image was made from it, changed by the container hook."""
    t0 = time.monotonic()
    hook, files = tmp / "container.sh", tmp / "container_files"
    hook.write_text(CONTAINER_HOOK)
    for path, entry in container_files().items():  # exactly what the recipe hashes
        mode, _, text = entry.partition(" ")
        (files / path).parent.mkdir(parents=True, exist_ok=True)
        (files / path).write_text(text, encoding="utf-8")
        (files / path).chmod(int(mode, 8))
    run(["sh", hook, rootfs, files], capture_output=True)
    hook.unlink()
    shutil.rmtree(files)
    run(["tar", "-C", rootfs, "--numeric-owner", "--xattrs", "--acls", *(f"--exclude={e}" for e in CONTAINER_EXCLUDES),
         "-cf", tmp / CONTAINER_TAR, "."], capture_output=True)
    log.info("container image (tar): %.0f s", time.monotonic() - t0)


def _mmdebstrap_argv(tmp: Path, rootfs: Path, arch: str, pair: bool = False) -> list:
    """The mmdebstrap command line of the recipe; writes its hooks into `tmp` as files it runs."""
    hook = tmp / "customize.sh"
    hook.write_text(CUSTOMIZE_HOOK)
    hook.chmod(0o755)
    extra = []
    essential = recipe(arch).get("essential_hook")
    if essential:
        ehook = tmp / "essential.sh"
        ehook.write_text(essential)
        ehook.chmod(0o755)
        extra.append(f"--essential-hook=sh {shlex.quote(str(ehook))} \"$1\"")
    return ["mmdebstrap", "--variant=minbase", "--format=directory",
            f"--architectures={ARCHES[arch].debian}",
            "--include=" + ",".join(packages(arch, pair)),
            '--aptopt=Acquire::Retries "5"',
            *(f"--dpkgopt={o}" for o in DPKG_OPTS), *extra,
            f"--customize-hook=sh {shlex.quote(str(hook))} \"$1\" "
            f"{shlex.quote(str(tmp / 'id_ed25519.pub'))}",
            SUITE, rootfs, *MIRRORS]


def _run_mmdebstrap(argv: list, build_log: Path, lock_fd: int) -> None:
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
        raise VMError(f"mmdebstrap failed ({proc.returncode}):\n{tail(build_log, 40)}")


def _check_rootfs(tmp: Path, rootfs: Path) -> None:
    """Take the kernel and initrd out of the built rootfs, and check that the customize hook's effects are there."""
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
