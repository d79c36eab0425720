"""The tunables and where their values come from, lowest first: the packaged defaults (specfleet/defaults.py, package
data) < the project's overrides (group_data/all.py) < the deploy's profile < inventory vars (specfleet/fleet/settings.py
layers the last two). Inventory vars that configure the connection are no tunables: they go to pyinfra untouched.
"""

from __future__ import annotations

import ast
import difflib
import importlib.resources
from collections.abc import Iterable
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

from .problems import Problem
from .project import OVERRIDES_FILE, project_dir

# Package data (read with importlib.resources, so an installed wheel needs no source tree).
DEFAULTS_FILE = importlib.resources.files("specfleet").joinpath("defaults.py")

# Inventory vars that configure the connection, not the deploy: passed to pyinfra untouched.
ANSIBLE_CONNECTION_ALIASES = {
    "ansible_host": "ssh_hostname",
    "ansible_port": "ssh_port",
    "ansible_user": "ssh_user",
    "ansible_ssh_private_key_file": "ssh_key",
}
# pyinfra global arguments that make sense as host data (privilege escalation for non-root SSH users).
PYINFRA_HOST_ARGS = {"_sudo", "_sudo_user", "_use_sudo_password", "_use_sudo_login", "_preserve_sudo_env", "_su_user"}


def load_defaults(path=DEFAULTS_FILE) -> dict[str, Any]:
    """Module-level assignments of the packaged defaults file (fresh objects on every call)."""
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("_")}


def load_overrides(project: Path | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """The project's group_data/all.py: the user's overrides of the packaged defaults, checked by name.

    Read as pyinfra reads group data (module-level names; imports, functions and `__names` are not
    data). Unknown names are refused with a suggestion; connection vars (ssh_*, _sudo, ...) are refused
    too (they belong in the fleet file, where specfleet and testinfra see them); other `_names` are
    private helpers. Values are validated per host with everything else.
    """
    path = (project or project_dir()) / OVERRIDES_FILE
    if not path.is_file():
        return {}, []
    where = str(path)
    namespace: dict[str, Any] = {"__file__": where}
    try:
        exec(compile(path.read_text(encoding="utf-8"), where, "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - a user file: report it in one line
        return {}, [Problem(where, "file", f"cannot be loaded: {type(exc).__name__}: {exc}")]
    defaults = load_defaults()
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in namespace.items():
        if key.startswith("__") or isinstance(value, (ModuleType, FunctionType, type)):
            continue
        if key.startswith("ssh_") or key in PYINFRA_HOST_ARGS or key in ANSIBLE_CONNECTION_ALIASES:
            problems.append(Problem(where, key, "connection vars belong in the fleet file (all: vars:), "
                                                "not in group_data/all.py"))
        elif key.startswith("_"):
            continue
        elif key not in defaults:
            problems.append(Problem(where, key, unknown_variable(key, defaults)))
        else:
            out[key] = value
    return out, problems


def unknown_variable(key: str, known: Iterable[str]) -> str:
    """The message for a variable that is no tunable, with the closest name if there is one."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return "unknown variable" + (f" (did you mean {close[0]}?)" if close else " (`specfleet vars` lists the variables)")


def default_comments(path=DEFAULTS_FILE) -> dict[str, str]:
    """The one-line comment documenting each default (used by `specfleet vars` and docs/variables.md)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            line = lines[(node.end_lineno or node.lineno) - 1]
            _, sep, comment = line.rpartition("  # ")
            comments[node.targets[0].id] = comment.strip() if sep else ""
    return comments


def split_vars(host_vars: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate connection data (for pyinfra) from deploy vars (for Settings)."""
    connection: dict[str, Any] = {}
    deploy: dict[str, Any] = {}
    for key, value in host_vars.items():
        if key.startswith("ssh_") or key in PYINFRA_HOST_ARGS:
            connection[key] = value
        elif key in ANSIBLE_CONNECTION_ALIASES:
            connection[ANSIBLE_CONNECTION_ALIASES[key]] = value
        else:
            deploy[key] = value
    return connection, deploy
