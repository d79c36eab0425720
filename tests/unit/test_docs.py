"""The user's manual (docs/, built by mkdocs.yml) and the README that points into it: the variables page generated from
the packaged defaults (specfleet/defaults.py) and in step with `specfleet vars`, a short README whose links resolve,
every page in the site's nav and on the index, and user pages that say what is, not what was."""

import importlib.util
import re
import unicodedata
from pathlib import Path

import yaml

from specfleet.fleet.tunables import default_comments, load_defaults

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 300
REGENERATE = "python3 docs/gen_variables.py"
# History in a user page: the docs say what is and why; what changed between versions is in docs/upgrades.md.
HISTORY = [r"\bissues? #?[0-9]", r"before the redesign", r"\bnot yet run again\b", r"\bthis session\b",
           r"versions of this README", r"\(was ", r"\bis now\b", r"\bare now\b", r"\bas before\b", r"\bused to\b"]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_variables", DOCS / "gen_variables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_rows() -> dict[str, str]:
    """The variables page's table rows by name, with the page's `&lt;` read back as `<`."""
    text = (DOCS / "variables.md").read_text().replace("&lt;", "<")
    return {m.group(1): m.group(0) for m in re.finditer(r"^\| `([a-z_0-9]+)` \| .*\|$", text, flags=re.M)}


def _user_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if DOCS / "dev" not in p.parents)


def _slug(heading: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    text = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_variables_page_is_generated_from_the_defaults():
    assert (DOCS / "variables.md").read_text() == _generator().render(), (
        f"docs/variables.md is out of step with specfleet/defaults.py: regenerate it with `{REGENERATE}`")


def test_every_default_has_a_comment():
    assert all(default_comments()[name] for name in load_defaults())


def test_every_var_in_the_variables_page_and_back_with_its_comment():
    rows = _page_rows()
    defaults = load_defaults()
    assert set(rows) == set(defaults), (set(rows) ^ set(defaults), f"run `{REGENERATE}`")
    comments = default_comments()
    for name, row in rows.items():
        assert row.split(" | ", 2)[2].removesuffix(" |").strip() == comments[name], (name, f"run `{REGENERATE}`")


def test_specfleet_vars_prints_the_variables_page_rows():
    from click.testing import CliRunner

    from specfleet.cli import main
    out = CliRunner().invoke(main, ["vars"]).output
    table = [line for line in out.splitlines() if line.startswith("| `")]
    assert table and sorted(table) == sorted(_page_rows().values()), f"run `{REGENERATE}`"


def test_readme_is_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): move the "
                                       "details to a page under docs/ and link it")


def test_readme_links_into_docs_resolve():
    links = re.findall(r"\]\((docs/[^)#\s]*)(?:#([^)\s]*))?\)", README.read_text())
    assert len(links) >= 10, links
    for target, anchor in links:
        path = ROOT / target
        assert path.is_file(), f"README.md links to {target}, which does not exist"
        assert not anchor or anchor in _anchors(path), f"README.md links to {target}#{anchor}: no such heading"


def test_user_pages_say_what_is_not_what_was():
    found = [f"{page.relative_to(ROOT)}:{n}: {m.group(0)!r}"
             for page in [README, *_user_pages()]
             for n, line in enumerate(page.read_text().splitlines(), 1)
             for pattern in HISTORY for m in [re.search(pattern, line, flags=re.I)] if m]
    assert not found, "history in a user page (say what is and why; changes go in docs/upgrades.md):\n" + \
        "\n".join(found)


def test_every_page_is_in_the_site_nav_and_on_the_index():
    def nav_pages(node):
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for child in node:
                yield from nav_pages(child)
        elif isinstance(node, dict):
            for child in node.values():
                yield from nav_pages(child)

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config["validation"]["links"]["anchors"] == "warn"
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert sorted(nav_pages(config["nav"])) == sorted(pages), "mkdocs.yml's nav lists every page under docs/, once"
    index = (DOCS / "index.md").read_text()
    assert not {p for p in pages - {"index.md"} if f"]({p})" not in index}, "docs/index.md links every page"
