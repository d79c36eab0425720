"""Writes docs/variables.md from the packaged defaults (specfleet/defaults.py): one table per section of that file,
each row as `specfleet vars` prints it. tests/unit/test_docs.py regenerates the page in memory and compares.

    python3 docs/gen_variables.py          # rewrite docs/variables.md
    python3 docs/gen_variables.py --check  # exit 1 when docs/variables.md differs
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from click.testing import CliRunner

from specfleet.cli import main
from specfleet.fleet.tunables import DEFAULTS_FILE, load_defaults

PAGE = Path(__file__).resolve().parent / "variables.md"
REGENERATE = "python3 docs/gen_variables.py"
LOWERCASE_NAMES = {"systemd", "tiktoken"}  # a section title that starts with a name keeps its case

INTRO = f"""# Variables

<!-- Generated from specfleet/defaults.py by docs/gen_variables.py: do not edit by hand; run `{REGENERATE}`. -->

Every tunable, its default and a one-line description live in one packaged file, `specfleet/defaults.py`;
`specfleet vars` prints these rows as one table (`--project` adds a column with your `group_data/all.py` values), and
`tests/unit/test_docs.py` keeps this page in step with it (`{REGENERATE}` rewrites the page).

Where a value comes from, lowest precedence first: these defaults < the project's `group_data/all.py` < the deploy's
profile < the fleet file's vars ([Inventory format](inventory.md)). What `extra_llm_api_options` may hold:
[TensorRT-LLM options](trtllm-options.md).
"""


def vars_rows() -> dict[str, str]:
    """`specfleet vars`'s table rows, by variable name."""
    out = CliRunner().invoke(main, ["vars"])
    assert out.exit_code == 0, out.output
    rows = {}
    for line in out.output.splitlines():
        m = re.match(r"^\| `([a-z_0-9]+)` \|", line)
        if m:
            rows[m.group(1)] = line
    return rows


def sections() -> list[tuple[str, str, list[str]]]:
    """(title, note, variable names) per `# --- title (note) ---` section of the defaults file, in file order."""
    source = DEFAULTS_FILE.read_text(encoding="utf-8")
    heads = {}
    for number, line in enumerate(source.splitlines(), 1):
        m = re.match(r"^# --- (.+?) -+$", line)
        if m:
            heads[number] = m.group(1)
    out: list[tuple[str, str, list[str]]] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            head = max((n for n in heads if n < node.lineno), default=None)
            text = heads[head] if head else "other"
            title, _, note = text.partition(" (")
            if not out or out[-1][0] != title:
                out.append((title, note.removesuffix(")"), []))
            out[-1][2].append(node.targets[0].id)
    return out


def escape(text: str) -> str:
    """Markdown text with `<` escaped outside code spans (`<port>` is no HTML tag)."""
    parts = text.split("`")
    return "`".join(p.replace("<", "&lt;") if i % 2 == 0 else p for i, p in enumerate(parts))


def render() -> str:
    rows = vars_rows()
    names = [name for _, _, group in sections() for name in group]
    assert sorted(names) == sorted(load_defaults()) == sorted(rows), "every default, once, in a section"
    out = [INTRO]
    for title, note, group in sections():
        first = title.split()[0]
        out.append(f"## {title if first in LOWERCASE_NAMES else first.capitalize() + title[len(first):]}\n")
        if note:
            out.append(f"*{escape(note)}*\n")
        out.append("| var | default | what it does |\n|---|---|---|")
        for name in group:
            cells = rows[name].split(" | ")
            out.append(" | ".join(cells[:2]) + " | " + escape(" | ".join(cells[2:])))
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv[1:]:
        same = PAGE.read_text(encoding="utf-8") == text
        print(f"{PAGE}: {'in step' if same else 'differs; run ' + REGENERATE}")
        sys.exit(0 if same else 1)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE}")
