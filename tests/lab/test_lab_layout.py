"""The VM lab (lab/specfleet_lab, the `specfleet-lab` distribution) keeps its shape: modules of at most 400 lines,
functions of at most 60, no import of a lab module inside a function, and one direction between the lab and
specfleet: the lab may import specfleet, no specfleet module imports the lab. Its shell hooks are files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specfleet_lab import recipe

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "lab" / "specfleet_lab"
MODULES = sorted(LAB.rglob("*.py"))


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _imports(tree: ast.AST, package: str, in_function: bool = False):
    """(node, module name, inside a function) for every import; a relative import is named `package`."""
    for child in ast.iter_child_nodes(tree):
        inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.Import):
            yield from ((child, a.name, inner) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            yield child, (package if child.level else child.module or ""), inner
        yield from _imports(child, package, inner)


def test_the_lab_is_there():
    """The seam (host, drivers, state, fleet) and a package per driver."""
    assert {str(p.relative_to(LAB).with_suffix("")) for p in MODULES} >= {
        "arch", "recipe", "image", "host", "drivers", "state", "fleet", "cli",
        "qemu/guest", "qemu/accel", "qemu/driver", "container/engine", "container/host", "container/driver"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LAB)))
def test_module_and_function_sizes(path):
    source = path.read_text()
    assert len(source.splitlines()) <= 400, f"{path.name}: {len(source.splitlines())} lines"
    long = [f"{f.name} ({f.end_lineno - f.lineno + 1} lines)" for f in _functions(ast.parse(source))
            if f.end_lineno - f.lineno + 1 > 60]
    assert not long, f"{path.name}: functions over 60 lines: {long}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(LAB)))
def test_lab_imports_at_the_top_only(path):
    imports = _imports(ast.parse(path.read_text()), "specfleet_lab")
    inside = [f"{path.name}:{node.lineno} {name}" for node, name, in_function in imports
              if in_function and name.split(".")[0] in ("specfleet_lab", "specfleet")]
    assert not inside, inside


def test_specfleet_never_imports_the_lab():
    found = [f"{p.relative_to(ROOT)}:{node.lineno}" for p in sorted((ROOT / "specfleet").rglob("*.py"))
             for node, name, _ in _imports(ast.parse(p.read_text()), "specfleet")
             if name.split(".")[0] == "specfleet_lab"]
    assert not found, found


def test_hooks_are_shell_files_of_the_recipe():
    hooks = sorted((LAB / "hooks").glob("*.sh"))
    assert [h.name for h in hooks] == ["container.sh", "customize.sh", "initramfs.sh"]
    assert (LAB / "hooks" / "customize.sh").read_text() == recipe.CUSTOMIZE_HOOK
    assert (LAB / "hooks" / "container.sh").read_text() == recipe.CONTAINER_HOOK
    assert (LAB / "hooks" / "initramfs.sh").read_text() == recipe.INITRAMFS_HOOK
    assert not any('"""#!/bin/sh' in p.read_text() for p in MODULES)  # no shell program held in a Python string
