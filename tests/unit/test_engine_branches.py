"""No engine branches outside the engines' package (specfleet/engines/): everything else asks the host's Engine
(engines/catalog.py) for what differs, so that a third engine is an entry there, not a branch in every feature.

Read with `ast` over every module of specfleet/ outside engines/: the test fails, naming file:line, on
- a string constant that is an engine's name (`"vllm"`, `"trtllm"`), which only a branch or a lookup by name needs;
- a comparison whose side is an engine or its name (`engine ==`, `s.engine is TRTLLM`, `x.engine.name != ...`).
The profiles (specfleet/profiles/*.yml, data) name each profile's engine."""

from __future__ import annotations

import ast
from pathlib import Path

from specfleet.engines.catalog import ENGINES

PACKAGE = Path(__file__).resolve().parents[2] / "specfleet"
DATA: set[Path] = set()  # modules whose engine names are data
EXEMPT_DIRS = (PACKAGE / "engines", PACKAGE / "scaffold")


def _engine_side(node: ast.AST) -> bool:
    """An expression that is an engine or an engine's name: `engine`, `x.engine`, `x.engine_name`, `x.engine.name`."""
    if isinstance(node, ast.Name):
        return node.id in ("engine", "engine_name")
    if isinstance(node, ast.Attribute):
        return node.attr in ("engine", "engine_name") or (node.attr == "name" and _engine_side(node.value))
    return False


def branches(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ENGINES:
            out.append(f"{name}:{node.lineno}: the engine name {node.value!r}")
        elif isinstance(node, ast.Compare) and any(_engine_side(x) for x in [node.left, *node.comparators]):
            out.append(f"{name}:{node.lineno}: a comparison of an engine ({ast.unparse(node)})")
    return out


def test_no_engine_names_or_engine_comparisons_outside_the_engines_package():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in DATA or any(path.is_relative_to(d) for d in EXEMPT_DIRS):
            continue
        found += branches(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert not found, "engine branches outside specfleet/engines/:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_branch():
    code = ('if s.engine.name == "vllm": pass\n'
            "if plan.settings.engine is TRTLLM: pass\n"
            "x = {'trtllm': 1}\n"
            "if engine != other: pass\n"
            "y = s.engine.server + 'vllm serve'\n")
    found = branches(code, "m.py")
    assert sorted(f.split(": ", 1)[0] for f in found) == ["m.py:1", "m.py:1", "m.py:2", "m.py:3", "m.py:4"], found
