"""`specfleet bench --apply GROUP`: the fleet file with GROUP set to serve the best variant (pure; the command, which
shows the diff first and writes on a yes, is cli/bench.py).

The file is edited with ruamel.yaml's round trip, so its comments, key order, quoting and flow style stay as the
operator wrote them and the diff shows only what --apply sets (PyYAML would rewrite the whole file)."""

from __future__ import annotations

import difflib
import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from ..engines.catalog import engine_of
from ..fleet.profiles import profiles
from .rules import best_variant


def with_best_variant(results: list[dict[str, Any]], fleet_path: Path,
                      group: str) -> tuple[dict[str, Any] | None, str, str | None]:
    """(best variant, the fleet file's text, its text with GROUP's vars set to serve it: `serves` its profile, and its
    overrides deep-merged into its engine's options var); no best variant: (None, "", None); no such group in the
    file: (best, text, None)."""
    best = best_variant(results)
    if not best:
        return None, "", None
    var = engine_of(profiles()[best["profile"]]).options_var
    options = (best.get("overrides") or {}).get(var) or {}
    old_text = Path(fleet_path).read_text()
    rt = YAML()
    rt.preserve_quotes = True
    doc = rt.load(old_text)
    node = doc["all"] if group == "all" else _find_group(doc["all"], group)
    if node is None:
        return best, old_text, None
    if node.get("vars") is None:
        node["vars"] = {}
    node["vars"]["serves"] = best["profile"]
    if options:
        if not isinstance(node["vars"].get(var), dict):
            node["vars"][var] = {}
        _merge_into(node["vars"][var], options)
    out = io.StringIO()
    rt.dump(doc, out)
    return best, old_text, out.getvalue()


def _merge_into(node: Any, options: dict[str, Any]) -> None:
    """Deep-merge `options` into the loaded mapping in place (what is there keeps its comments and style)."""
    for key, value in options.items():
        if isinstance(value, dict) and isinstance(node.get(key), dict):
            _merge_into(node[key], value)
        else:
            node[key] = value


def fleet_diff(fleet_path: Path, old_text: str, new_text: str, variant: str) -> str:
    return "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                        str(fleet_path), str(fleet_path) + " (with " + variant + ")"))


def _find_group(node: dict[str, Any], name: str) -> dict[str, Any] | None:
    for child_name, child in (node.get("children") or {}).items():
        child = child if child is not None else {}
        if child_name == name:
            node["children"][child_name] = child
            return child
        found = _find_group(child, name)
        if found is not None:
            return found
    return None
