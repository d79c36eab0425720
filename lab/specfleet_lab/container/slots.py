"""Address pools of the lab's engines: each engine takes a /20 of BASE (16 networks of /24) for the run's networks,
machine-wide, so that two runs at once (the two processes of the full tier, a try.sh fleet left up, a run with a lab
root of its own) never route the same subnet to two bridges. A slot is a file in SLOTS (one directory for the
machine, whatever SPECFLEET_LAB_ROOT says; on /run, so a reboot, which ends every engine, frees them all) naming its
engine's directory; it is free again once that directory is gone (its engine stopped, or swept)."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
from pathlib import Path

from ..errors import VMError

BASE = ipaddress.ip_network("10.213.0.0/16")
SLOT_PREFIX = 20
SLOTS = Path("/run/specfleet-lab/slots")


def _dir() -> Path:
    SLOTS.mkdir(parents=True, exist_ok=True)
    return SLOTS


def pool(slot: int) -> str:
    return str(list(BASE.subnets(new_prefix=SLOT_PREFIX))[slot])


def take(engine_root: Path) -> int:
    """The first free slot, taken for `engine_root` (under a lock: two runs starting at once get two slots)."""
    d = _dir()
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for n in range(2 ** (SLOT_PREFIX - BASE.prefixlen)):
            f = d / str(n)
            owner = f.read_text().strip() if f.exists() else ""
            if owner == str(engine_root) or not owner or not Path(owner).exists():
                f.write_text(f"{engine_root}\n")
                return n
    raise VMError(f"every address pool of {BASE} is taken by a lab engine ({d}); `specfleet-lab down --all`")


def release(engine_root: Path) -> None:
    d = _dir()
    with open(d / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for f in d.iterdir():
            if f.name.isdigit():
                with contextlib.suppress(OSError):
                    if f.read_text().strip() == str(engine_root):
                        f.unlink()


def held_by(engine_root: Path) -> list[str]:
    d = SLOTS
    return [f.name for f in d.iterdir() if f.name.isdigit() and f.read_text().strip() == str(engine_root)] \
        if d.is_dir() else []
