"""The QEMU processes the lab started: found by pid file and checked by command line (the overlay they run) before
any signal, so that a recycled pid is never signalled."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from ..errors import VMError


def qesc(path) -> str:
    """A path inside a QEMU option string (commas are doubled)."""
    return str(path).replace(",", ",,")


def pid_is_our_qemu(pid: int, overlay: Path) -> bool:
    """True if pid is a live (non-zombie) QEMU process running `overlay`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state in ("Z", "X"):
        return False
    args = cmdline.split(b"\0")
    needle = f"file={qesc(overlay)},".encode()
    return b"qemu" in cmdline and any(needle in a for a in args)


def wait_gone(pid: int, overlay: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_is_our_qemu(pid, overlay):
            return True
        time.sleep(0.1)
    return not pid_is_our_qemu(pid, overlay)


def stop_qemu(pid: int, overlay: Path, term_timeout: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL, a QEMU process we started. Returns True if one was stopped."""
    if not pid_is_our_qemu(pid, overlay):
        return False
    for sig, wait in ((signal.SIGTERM, term_timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if wait_gone(pid, overlay, wait):
            return True
    raise VMError(f"QEMU pid {pid} ({overlay}) survived SIGKILL")
