"""`specfleet init DIR` (a new fleet project from the packaged scaffold), `specfleet vars` (every variable) and
`specfleet profiles` (every profile the project can run)."""

from __future__ import annotations

from pathlib import Path

import click

from ..constants import DEFAULT_INVENTORY
from ..engines.catalog import ENGINES
from ..fleet.profiles import ProfileError, catalog
from ..fleet.project import project_dir, scaffold_files
from ..fleet.tunables import default_comments, load_defaults, load_overrides
from .invalid import exit_invalid, invalid_input, use_inventory_py


@click.command("init")
@click.argument("directory", type=click.Path(file_okay=False))
def init(directory: str) -> None:
    """Write a new fleet project in DIRECTORY (created if missing): the fleet file, group_data/all.py, inventory.py,
    tests/infra and the deploys eagle3, draft_target, baseline, ngram, qwen3_eagle3_pair, vllm_eagle3,
    vllm_draft_target, vllm_ngram, vllm_baseline, gateway, hub_mirror, cleanup and rollback (deploys/NAME.py).
    Overwrites nothing (exit 2)."""
    root = Path(directory)
    files = scaffold_files()
    existing = [rel for rel in files if (root / rel).exists() or (root / rel).is_symlink()]
    if existing:
        exit_invalid([f"{directory}: refusing to overwrite {len(existing)} existing file(s): {', '.join(existing)}"])
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    click.echo(f"wrote a fleet project in {directory}: {', '.join(files)}")
    click.echo(f"next: cd {directory}; edit {DEFAULT_INVENTORY}; export HF_TOKEN=hf_...; "
               "specfleet lock inventory.py; specfleet check inventory.py deploys/eagle3.py")


def _short(value: object, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


@click.command("vars")
@click.option("--project", "show_project", is_flag=True,
              help="Also show the value the current project's group_data/all.py sets, if any.")
def vars_(show_project: bool) -> None:
    """Print every variable with its packaged default and what it does (docs/variables.md is made from it)."""
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


@click.command("profiles")
@click.argument("inventory_file", default="inventory.py", type=click.Path(dir_okay=False))
def profiles_cmd(inventory_file: str) -> None:
    """List every profile the project of INVENTORY_FILE can run: the packaged ones and the project's own
    (profiles/NAME.yml), with engine, target, draft and speculative method. Exit 2 on a bad profile file
    (profiles/NAME.yml: KEY: ...)."""
    with invalid_input():
        use_inventory_py(inventory_file)
        found = catalog()
        if found.problems:
            raise ProfileError([str(p) for p in found.problems])
    click.echo("| profile | from | engine | target | draft | method |")
    click.echo("|---|---|---|---|---|---|")
    for name, p in found.profiles.items():
        engine = ENGINES[p["engine"]]
        spec = p["options"].get("speculative_config") or {}
        method = spec.get(engine.method_key, "none")
        draft = p["draft"]["repo"] if p["draft"] else "none"
        nodes = f" (x{p['nodes']} Sparks)" if p["nodes"] > 1 else ""
        click.echo(f"| {name} | {found.origin[name]} | {engine.name} | {p['target']['repo']} | {draft} | "
                   f"{method}{nodes} |")
