"""The controller side of the lab, whatever the driver: its directories, local commands, TCP ports, pid files and
mounts left by a killed build or run."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import socket
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import VMError

log = logging.getLogger(__name__)


def default_workdir() -> Path:
    return Path(os.environ.get("SPECFLEET_VM_DIR") or ".vm")


def lab_root() -> Path:
    """Where the lab keeps what outlives one process: the registry of fleets up (`down --all`), the container engines
    of its runs and their address pools (SPECFLEET_LAB_ROOT)."""
    return Path(os.environ.get("SPECFLEET_LAB_ROOT") or "/var/tmp/specfleet-lab")


def default_cache_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_CACHE_DIR") or "~/.cache/specfleet").expanduser()


def resolve(path, default) -> Path:
    """`path` (or `default()` when None), user-expanded and absolute."""
    return Path(path if path is not None else default()).expanduser().absolute()


def run(argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
    log.debug("run: %s", shlex.join(str(a) for a in argv))
    kw.setdefault("check", True)
    return subprocess.run([str(a) for a in argv], **kw)


def tail(path: Path, lines: int = 40) -> str:
    try:
        data = Path(path).read_bytes()[-64 * 1024:]
    except OSError as e:
        return f"<no console log: {e}>"
    text = data.decode("utf-8", "replace").replace("\r", "")
    return "\n".join(text.splitlines()[-lines:])


def free_port(avoid: Iterable[int] = ()) -> int:
    avoid = set(avoid)
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise VMError("could not find a free TCP port on 127.0.0.1")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As QEMU's hostfwd does: connections in TIME_WAIT (left by a guest that was just powered
        # off) must not make the port look busy; a live listener still makes bind() fail.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def read_pid(pidfile: Path) -> int | None:
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


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


def safe_rmtree(path: Path) -> None:
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
