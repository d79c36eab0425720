"""A fleet project: the directory holding inventory.py, deploys/, group_data/all.py, inventory/fleet.yml
and tests/infra/. `specfleet init DIR` writes one from the packaged scaffold (specfleet/scaffold/); the
repository root is one too. The `init` and `vars` commands: cli/project.py.

Which project a run uses: the directory of the inventory.py it was given (`pyinfra inventory.py ...`
passes its own file; `specfleet check/render/rollout/releases INVENTORY_FILE` use its directory), else
the current directory (`pytest tests/infra`). From the project specfleet reads:

- the fleet file: $SPECFLEET_INVENTORY (relative to the current directory), else inventory/fleet.yml;
- the user's overrides of the packaged defaults: group_data/all.py (tunables.load_overrides).

Everything else (defaults, profiles, templates, the testinfra checks) is package data.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from ..constants import DEFAULT_INVENTORY

OVERRIDES_FILE = "group_data/all.py"
SCAFFOLD = "scaffold"
# Scaffold files written under another name: the example fleet becomes the project's fleet file.
RENAMED = {"inventory/example.yml": DEFAULT_INVENTORY}

_project: Path | None = None


def use_project(inventory_py: str | Path) -> Path:
    """Make the directory of `inventory_py` this run's project; returns it."""
    global _project
    _project = Path(inventory_py).resolve().parent
    return _project


def project_dir() -> Path:
    return _project or Path.cwd()


def scaffold_files() -> dict[str, str]:
    """Project-relative path -> content of every file `specfleet init` writes."""
    out: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.name == "__pycache__" or child.name.endswith(".pyc"):
                continue
            rel = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, rel + "/")
            else:
                out[RENAMED.get(rel, rel)] = child.read_text(encoding="utf-8")

    walk(importlib.resources.files("specfleet").joinpath(SCAFFOLD), "")
    return out
