"""Sizes that keep each module one concern, read from the source with `ast`:

- no product module over 400 lines; host programs (shipped to hosts, stdlib only) up to 500 if cohesive;
  data tables are exempt and named here;
- no function or method over 60 lines (decorators and docstring included: what a reader has to hold).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [ROOT / "specfleet", ROOT / "lab" / "specfleet_lab"]
MODULE_MAX, HOST_PROGRAM_MAX, FUNCTION_MAX = 400, 500, 60
DATA_TABLES: set[str] = set()  # e.g. "specfleet/serving/contract.py" if it outgrew 400 lines of pure data


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES if pkg.is_dir() for p in pkg.rglob("*.py") if "scaffold" not in p.parts)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def module_problems(path: Path, text: str) -> list[str]:
    lines = len(text.splitlines())
    rel = _rel(path)
    limit = HOST_PROGRAM_MAX if "/host/" in f"/{rel}" else MODULE_MAX
    return [] if rel in DATA_TABLES or lines <= limit else [f"{rel}: {lines} lines (at most {limit})"]


def function_problems(rel: str, text: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - start + 1
            if length > FUNCTION_MAX:
                out.append(f"{rel}:{node.lineno}: {node.name}() is {length} lines (at most {FUNCTION_MAX})")
    return out


def test_the_checks_can_fail():
    long_function = "def f():\n" + "    x = 1\n" * FUNCTION_MAX
    assert function_problems("m.py", long_function) == [f"m.py:1: f() is {FUNCTION_MAX + 1} lines (at most 60)"]
    assert module_problems(ROOT / "specfleet" / "x.py", "x = 1\n" * 401) == ["specfleet/x.py: 401 lines (at most 400)"]
    assert module_problems(ROOT / "specfleet" / "host" / "x.py", "x = 1\n" * 401) == []


@pytest.mark.parametrize("check", ["modules", "functions"])
def test_sizes(check):
    problems = []
    for path in _modules():
        text = path.read_text(encoding="utf-8")
        problems += module_problems(path, text) if check == "modules" else function_problems(_rel(path), text)
    assert not problems, "\n".join(problems)
