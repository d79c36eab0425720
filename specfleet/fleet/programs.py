"""Where the package keeps each program it ships to hosts: one lookup by file name.

Each feature keeps its host programs in its own `host/` folder (`gateway/host/drain.py`, `pair/host/pair_gate.py`);
the shared kit stays in `specfleet/host/` (`layout.py`, `hostlib.py`, `host_jobs.py`, `probes/`). On a host they are
installed side by side in one directory and import each other by bare name, so every file name is unique across the
package (tests/unit/test_layers.py checks it), and the layout's `HOST_PROGRAMS` names them by file name alone.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

_PACKAGE = resources.files("specfleet")


def feature_folders(kind: str) -> list[str]:
    """Every feature's folder of one kind (`host`, `templates`), relative to the package: `gateway/templates`, ..."""
    return sorted(f"{entry.name}/{kind}" for entry in _PACKAGE.iterdir() if entry.is_dir() and (entry / kind).is_dir())


@cache
def _by_name() -> dict[str, Traversable]:
    found: dict[str, Traversable] = {}
    for folder in [_PACKAGE / "host", _PACKAGE / "host" / "probes"] + [_PACKAGE / f for f in feature_folders("host")]:
        for item in folder.iterdir():
            if item.is_file() and not item.name.startswith(("_", ".")) and item.name.endswith((".py", ".sh", ".lua")):
                if item.name in found:
                    raise RuntimeError(f"two host programs are named {item.name}: {found[item.name]} and {item}")
                found[item.name] = item
    return found


def program(name: str) -> Traversable:
    """The packaged file of the host program (or probe) named `name`."""
    return _by_name()[name]


def program_text(name: str) -> str:
    return program(name).read_text(encoding="utf-8")


def program_names() -> set[str]:
    return set(_by_name())
