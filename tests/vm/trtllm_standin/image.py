"""Build the trtllm-serve STAND-IN container rootfs without a registry.

The result is a plain tarball for ``docker import``::

    tar = build_rootfs_tarball(Path("~/.cache/specfleet/standin").expanduser(), mode="ok")
    docker import $(for c in docker_import_changes(): --change "$c") TAR trtllm-standin:ok

How it is built
---------------
* BASE layer: ``mmdebstrap --variant=essential --include=python3-yaml`` of Debian
  bookworm (the merged-usr hook avoids pulling usrmerge+perl; man/doc/locale
  are path-excluded; no /dev nodes), written directly as a tar.  It holds no
  specfleet bytes, so it is cached under ``cache_dir`` keyed by the sha256 of
  the mmdebstrap recipe (arguments + suite + mirror + architecture) and only
  rebuilt when that recipe changes (~20-30 s, ~95 MiB).
* VARIANT: a copy of the base tar to which Python's ``tarfile`` appends small
  members -- ``/usr/local/bin/trtllm-serve`` (the stand-in script, 0755),
  ``/etc/trtllm-standin.json`` (the behaviour config, 0644) and the STAND-IN
  ``tensorrt_llm`` Python package (``pylib/tensorrt_llm``, under
  ``/usr/lib/python3/dist-packages``: ``tensorrt_llm.llmapi.llm_args`` with
  ``TorchLlmArgs`` / ``update_llm_args_with_extra_dict`` backed by the stand-in
  script's own validator, for specfleet's in-image config validation,
  specfleet/serving/validate.py).  No mmdebstrap run; cost is one file copy
  (well under a second).  Cached keyed by the sha256 of (assembly version, base
  recipe key, script bytes, package files, config JSON).

Inside a VM, a harness can make a variant from an already imported image
instead::

    docker create --name cfg IMAGE true
    printf '%s' "$(variant_config_json(...))" > cfg.json
    docker cp cfg.json cfg:/etc/trtllm-standin.json
    docker commit $(--change ...) cfg trtllm-standin:crash && docker rm cfg
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDIN_SCRIPT = HERE / "trtllm_serve.py"
SCRIPT_PATH_IN_IMAGE = "/usr/local/bin/trtllm-serve"
CONFIG_PATH_IN_IMAGE = "/etc/trtllm-standin.json"
LAUNCH_SCRIPT = HERE / "llmapi_launch.sh"  # the STAND-IN trtllm-llmapi-launch (mpirun's command on every rank)
LAUNCH_PATH_IN_IMAGE = "/usr/local/bin/trtllm-llmapi-launch"
# A pair's image (pair=True): OpenMPI for mpirun and its daemons, the SSH client its rsh agent runs
# (specfleet/pair/host/pair_agent.sh), mpi4py for the leader and worker ranks (pylib/tensorrt_llm/llmapi)
PAIR_PACKAGES = ("openmpi-bin", "openssh-client", "python3-mpi4py")
# The STAND-IN tensorrt_llm package (source tree dir -> dir on the image's python3 path; Debian's
# /usr/lib/python3/dist-packages is on sys.path for every python3 version).
PYLIB_DIR = HERE / "pylib"
PYLIB_PATH_IN_IMAGE = "/usr/lib/python3/dist-packages"
# TensorRT-LLM's contract as extracted from upstream (tests/contract): module + table, beside the package
CONTRACT_FILES = (HERE.parent.parent / "contract" / "trtllm_contract.py",
                  HERE.parent.parent / "contract" / "trtllm_llm_args.json")
# the stand-ins' one rule for the credential headers they log (the vLLM stand-in's image derives from this one)
SHARED_FILES = (HERE.parent / "standin_common" / "standin_credentials.py",)
MODES = ("ok", "crash", "never_healthy", "empty", "oom_load", "oom_request")  # trtllm_serve.py MODES

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Bumped whenever the way variants are assembled changes (part of the cache key).
_ASSEMBLY_VERSION = "3"  # 2: + the STAND-IN tensorrt_llm package; 3: + trtllm-llmapi-launch
# Fixed mtime for the appended members, so variant tarballs are reproducible.
_MEMBER_MTIME = 1700000000

_DPKG_EXCLUDES = (
    "/usr/share/man/*",
    "/usr/share/doc/*",
    "/usr/share/locale/*",
    "/usr/share/info/*",
    "/usr/share/lintian/*",
)


def _native_arch() -> str:
    try:
        out = subprocess.run(["dpkg", "--print-architecture"], check=True,
                             capture_output=True, text=True).stdout.strip()
        if out:
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


_DEBIAN_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def debian_arch(arch: str | None = None) -> str:
    """dpkg's name of an architecture (x86_64 -> amd64, aarch64 -> arm64); None: the controller's."""
    if arch is None:
        return _native_arch()
    return _DEBIAN_ARCH.get(arch, arch)


def mmdebstrap_args(arch: str | None = None, mirror: str | None = None, *, pair: bool = False) -> list[str]:
    """The mmdebstrap command line for the base rootfs (output path appended by the caller). `arch`: the
    guests' architecture (x86_64/amd64, aarch64/arm64; default the controller's); a foreign one is built
    through qemu-user (binfmt_misc, tests/install-deps.sh). `pair`: the base of a two-Spark pair's image, which
    also carries PAIR_PACKAGES (what NVIDIA's image has for `mpirun ... trtllm-llmapi-launch`)."""
    arch = debian_arch(arch)
    mirror = mirror or os.environ.get("SPECFLEET_DEBIAN_MIRROR", DEFAULT_MIRROR)
    args = [
        "mmdebstrap",
        "--variant=essential",
        "--include=" + ",".join(("python3-yaml",) + (PAIR_PACKAGES if pair else ())),  # python3-yaml pulls python3
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",  # usr-is-merged instead of usrmerge+perl
        "--skip=output/dev",  # no device nodes: docker provides /dev
        "--architectures=" + arch,
        "--format=tar",
    ]
    args += ["--dpkgopt=path-exclude=" + p for p in _DPKG_EXCLUDES]
    args += ["--customize-hook=chroot \"$1\" python3 -c 'import yaml, http.server, json%s'"
             % (", mpi4py, shutil; mpi4py.rc.initialize = False; from mpi4py import MPI; "  # loads libmpi
                "assert shutil.which(\"mpirun\") and shutil.which(\"ssh\")" if pair else "")]
    args += [SUITE]
    # the target (output tar) goes here, then the mirror
    return args + ["{TARGET}", mirror]


def base_recipe_key(arch: str | None = None, mirror: str | None = None, *, pair: bool = False) -> str:
    recipe = {"mmdebstrap": mmdebstrap_args(arch, mirror, pair=pair)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def variant_config_json(mode: str = "ok", load_delay_s: float = 5.0, version: str = "1.2.0rc6", **perf) -> str:
    """Content of /etc/trtllm-standin.json for one behaviour variant. `perf`: the SYNTHETIC speculative-decoding
    model's parameters (target_step_ms, prefill_ms_per_token, seed, speculation; see trtllm_serve.py), written
    only when given (the stand-in's defaults apply otherwise)."""
    unknown = set(perf) - {"target_step_ms", "prefill_ms_per_token", "seed", "speculation"}
    if unknown:
        raise ValueError(f"unknown stand-in behaviour keys: {', '.join(sorted(unknown))}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(load_delay_s, bool) or not isinstance(load_delay_s, (int, float)) or load_delay_s < 0:
        raise ValueError(f"load_delay_s must be a number >= 0, got {load_delay_s!r}")
    if not isinstance(version, str) or not version:
        raise ValueError("version must be a non-empty string")
    return json.dumps({"mode": mode, "load_delay_s": float(load_delay_s), "version": version, **perf},
                      sort_keys=True) + "\n"


def docker_import_changes() -> list[str]:
    """--change arguments for `docker import` (and `docker commit`) of the stand-in rootfs."""
    return [
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        "ENV PYTHONUNBUFFERED=1",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "WORKDIR /",
        'CMD ["/bin/bash"]',
        "LABEL org.opencontainers.image.title=trtllm-serve-standin",
        "LABEL org.opencontainers.image.description=STAND-IN-for-TensorRT-LLM-trtllm-serve-NOT-TensorRT-LLM",
    ]


@contextlib.contextmanager
def _locked(cache_dir: Path, name: str):
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / (".lock-" + name), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_mmdebstrap(args: list[str], target: Path) -> None:
    argv = [str(target) if a == "{TARGET}" else a for a in args]
    if os.geteuid() != 0:
        argv.insert(1, "--mode=unshare")
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mmdebstrap failed (exit {proc.returncode:d}): {' '.join(argv)}\n"
                           f"{(proc.stdout + proc.stderr)[-4000:]}")


def build_base_tarball(cache_dir: Path, arch: str | None = None, mirror: str | None = None, *,
                       pair: bool = False) -> Path:
    """The cached Debian base rootfs tar (no stand-in files); runs mmdebstrap only on a cache miss."""
    cache_dir = Path(cache_dir)
    key = base_recipe_key(arch, mirror, pair=pair)
    out = cache_dir / f"debian-{SUITE}-{'pair' if pair else 'python3-yaml'}-{key[:16]}.tar"
    if out.exists():
        return out
    with _locked(cache_dir, "base-" + key[:16]):
        if out.exists():
            return out
        tmp = cache_dir / f".tmp-{out.stem}-{os.getpid():d}.tar"
        try:
            _run_mmdebstrap(mmdebstrap_args(arch, mirror, pair=pair), tmp)
            os.replace(tmp, out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return out


def _tar_member(name: str, data: bytes, mode: int) -> tuple[tarfile.TarInfo, io.BytesIO]:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mode = mode
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    ti.mtime = _MEMBER_MTIME
    return ti, io.BytesIO(data)


def standin_package_files() -> list[tuple[str, bytes | None]]:
    """(path in the image, bytes; None for a directory) of the STAND-IN tensorrt_llm package, parents first, the
    contract module and table the stand-in validates with, and the stand-ins' shared modules."""
    out: list[tuple[str, bytes | None]] = []
    for path in sorted(PYLIB_DIR.rglob("*")):
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        dest = PYLIB_PATH_IN_IMAGE + "/" + path.relative_to(PYLIB_DIR).as_posix()
        out.append((dest, None if path.is_dir() else path.read_bytes()))
    for path in CONTRACT_FILES + SHARED_FILES:  # the extracted upstream contract; the credentials rule
        out.append((PYLIB_PATH_IN_IMAGE + "/" + path.name, path.read_bytes()))
    return out


def add_standin_files(base_tar: Path, out_tar: Path, config_json: str,
                      script: bytes | None = None) -> Path:
    """Copy base_tar to out_tar and append the stand-in script, behaviour config and tensorrt_llm package to it."""
    script = STANDIN_SCRIPT.read_bytes() if script is None else script
    tmp = out_tar.with_name(f".tmp-{out_tar.name}-{os.getpid():d}")
    try:
        shutil.copyfile(base_tar, tmp)
        with tarfile.open(tmp, "a", format=tarfile.PAX_FORMAT) as tf:
            for name, data, mode in (
                    ("." + SCRIPT_PATH_IN_IMAGE, script, 0o755),
                    ("." + LAUNCH_PATH_IN_IMAGE, LAUNCH_SCRIPT.read_bytes(), 0o755),
                    ("." + CONFIG_PATH_IN_IMAGE, config_json.encode(), 0o644)):
                tf.addfile(*_tar_member(name, data, mode))
            for dest, data in standin_package_files():
                if data is None:
                    ti = tarfile.TarInfo("." + dest)
                    ti.type, ti.mode, ti.uid, ti.gid = tarfile.DIRTYPE, 0o755, 0, 0
                    ti.uname = ti.gname = "root"
                    ti.mtime = _MEMBER_MTIME
                    tf.addfile(ti)
                else:
                    tf.addfile(*_tar_member("." + dest, data, 0o644))
        os.replace(tmp, out_tar)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return out_tar


def _prune_stale_variants(cache_dir: Path, stamp: str, min_age_s: float = 3600.0) -> None:
    """Delete variant tars assembled from another script/base (stale stamp) and not touched for an hour."""
    now = time.time()
    for old in cache_dir.glob("trtllm-standin-*.tar"):
        parts = old.stem.split("-")  # trtllm, standin, <stamp>, <mode...>, <cfg>
        if len(parts) >= 5 and parts[2] != stamp:
            with contextlib.suppress(OSError):
                if now - old.stat().st_mtime > min_age_s:
                    old.unlink()


def build_rootfs_tarball(cache_dir: Path, mode: str = "ok", load_delay_s: float = 5.0,
                         version: str = "1.2.0rc6", *, arch: str | None = None,
                         mirror: str | None = None, pair: bool = False) -> Path:
    """Path to a `docker import`-able rootfs tar of the stand-in with the given behaviour.

    First call: mmdebstrap base (~20-30 s) + variant (<1 s).  Later calls with the
    same recipe return the cached file immediately; a new mode/delay/version or a
    changed stand-in script only re-assembles the variant (no mmdebstrap).
    Variant tars of an older script/base that were not touched for an hour are pruned.
    """
    cache_dir = Path(cache_dir)
    config_json = variant_config_json(mode, load_delay_s, version)
    script = STANDIN_SCRIPT.read_bytes()
    base_key = base_recipe_key(arch, mirror, pair=pair)
    h = hashlib.sha256()
    package = json.dumps([(dest, None if data is None else hashlib.sha256(data).hexdigest())
                          for dest, data in standin_package_files()]).encode()
    for part in (_ASSEMBLY_VERSION.encode(), base_key.encode(), script, LAUNCH_SCRIPT.read_bytes(), package):
        h.update(hashlib.sha256(part).digest())
    stamp = h.hexdigest()[:12]  # which base + script the variant is made of
    cfg = hashlib.sha256(config_json.encode()).hexdigest()[:10]
    out = cache_dir / f"trtllm-standin-{stamp}-{mode.replace('_', '')}-{cfg}.tar"
    if out.exists():
        with contextlib.suppress(OSError):
            os.utime(out)  # mark as in use (pruning looks at mtime)
        return out
    base = build_base_tarball(cache_dir, arch, mirror, pair=pair)
    with _locked(cache_dir, f"variant-{stamp}-{cfg}"):
        if not out.exists():
            add_standin_files(base, out, config_json, script)
    _prune_stale_variants(cache_dir, stamp)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Build the trtllm-serve STAND-IN rootfs tarball "
                                            "(prints its path and the docker import command).")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(os.environ.get("SPECFLEET_CACHE_DIR") or Path.home() / ".cache" / "specfleet"),
                   help="default: $SPECFLEET_CACHE_DIR or ~/.cache/specfleet (the VM lab's cache)")
    p.add_argument("--mode", choices=MODES, default="ok")
    p.add_argument("--load-delay-s", type=float, default=5.0)
    p.add_argument("--version", default="1.2.0rc6")
    p.add_argument("--arch", default=None, help="amd64/x86_64 or arm64/aarch64 (default: this machine's)")
    p.add_argument("--pair", action="store_true", help=f"a two-Spark pair's image (with {', '.join(PAIR_PACKAGES)})")
    a = p.parse_args(argv)
    t0 = time.monotonic()
    out = build_rootfs_tarball(a.cache_dir, a.mode, a.load_delay_s, a.version, arch=a.arch, pair=a.pair)
    print(out)
    changes = " ".join(f"--change {_shell_quote(c)}" for c in docker_import_changes())
    print(f"# built/cached in {time.monotonic() - t0:.1f} s; import with:\n"
          f"# docker import {changes} {out} trtllm-standin:{a.mode}")
    return 0


def _shell_quote(s: str) -> str:
    import shlex
    return shlex.quote(s)


if __name__ == "__main__":
    raise SystemExit(main())
