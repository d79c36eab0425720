"""A fleet project: the directory holding inventory.py, deploys/, group_data/all.py, inventory/fleet.yml
and tests/infra/. `specfleet init DIR` writes one from the packaged scaffold (specfleet/scaffold/); the
repository root is one too.

Which project a run uses: the directory of the inventory.py it was given (`pyinfra inventory.py ...`
passes its own file; `specfleet check/render/rollout/releases INVENTORY_FILE` use its directory), else
the current directory (`pytest tests/infra`). From the project specfleet reads:

- the fleet file: $SPECFLEET_INVENTORY (relative to the current directory), else inventory/fleet.yml;
- the user's overrides of the packaged defaults: group_data/all.py (settings.load_overrides).

Everything else (defaults, profiles, templates, the testinfra checks) is package data.
"""

from __future__ import annotations

import importlib.resources
import sys
from pathlib import Path

import click

DEFAULT_INVENTORY = "inventory/fleet.yml"
OVERRIDES_FILE = "group_data/all.py"
SCAFFOLD = "scaffold"
# Scaffold files written under another name: the example fleet becomes the project's fleet file.
RENAMED = {"inventory/example.yml": DEFAULT_INVENTORY}
EXIT_INVALID = 2

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


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
def init(directory: str) -> None:
    """Write a new fleet project in DIRECTORY (created if missing); overwrites nothing (exit 2)."""
    root = Path(directory)
    files = scaffold_files()
    existing = [rel for rel in files if (root / rel).exists() or (root / rel).is_symlink()]
    if existing:
        click.echo(f"{directory}: refusing to overwrite {len(existing)} existing file(s): {', '.join(existing)}", err=True)
        sys.exit(EXIT_INVALID)
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    click.echo(f"wrote a fleet project in {directory}: {', '.join(files)}")
    click.echo(f"next: cd {directory}; edit {DEFAULT_INVENTORY}; export HF_TOKEN=hf_...; "
               "specfleet check inventory.py deploys/eagle3.py")


def _short(value: object, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


@click.command("vars")
@click.option("--project", "show_project", is_flag=True,
              help="Also show the value the current project's group_data/all.py sets, if any.")
def vars_(show_project: bool) -> None:
    """Print every variable with its packaged default and what it does (the README's table)."""
    from .settings import default_comments, load_defaults, load_overrides

    defaults, comments = load_defaults(), default_comments()
    overrides = load_overrides(project_dir())[0] if show_project else {}
    head = "| var | default | what it does |" + (" group_data/all.py |" if show_project else "")
    click.echo(head)
    click.echo("|---|---|---|" + ("---|" if show_project else ""))
    for name, value in defaults.items():
        row = f"| `{name}` | `{_short(value)}` | {comments[name]} |"
        if show_project:
            row += f" {'`' + _short(overrides[name]) + '`' if name in overrides else ''} |"
        click.echo(row)
