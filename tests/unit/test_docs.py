"""The user's manual (docs/, built by mkdocs.yml) and the README that points into it: the variables page generated from
the packaged defaults (specfleet/defaults.py) and in step with `specfleet vars`, a short README whose links resolve,
every page in the site's nav and on the index, and user pages that say what is, not what was. Checked against the code:
no page cites a path its reader does not have; every list of deploys and profiles (pages, the `serves` description,
--help) is the code's; the engines are named where specfleet is introduced; the examples of `metrics scrape-config` and
`bench --apply` are what the code writes."""

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


# ---- what the pages cite and list, against the code ---------------------------------------------------------------
SCAFFOLD_README = ROOT / "specfleet" / "scaffold" / "README.md"
# a path into the repository, as the pages cite one (`specfleet/engines/catalog.py`, `tests/unit/test_check.py::X`)
REPO_PATH = re.compile(r"(?<![\w./-])((?:specfleet|tests|docs|lab|benchmarks|\.ci)/[\w.*/-]*[\w*/])")
UP_PATH = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.*/-]*[\w*/])")  # a path that climbs out of the page's directory


def _cited_paths(page: Path, text: str | None = None) -> list[str]:
    """Where a page cites a path its reader does not have: one that climbs out of the repository or to nothing in it
    (`../shared/...`), or a path into the repository that does not exist there."""
    found = []
    for n, line in enumerate((page.read_text() if text is None else text).splitlines(), 1):
        for m in UP_PATH.finditer(line):
            target = (page.parent / m.group(1)).resolve()
            if not target.is_relative_to(ROOT) or not target.exists():
                found.append(f"{page.relative_to(ROOT)}:{n}: {m.group(1)}: not in the repository")
        for m in REPO_PATH.finditer(line):
            if not any(ROOT.glob(m.group(1).rstrip("/"))):
                found.append(f"{page.relative_to(ROOT)}:{n}: {m.group(1)}: no such path in the repository")
    return found


def test_no_user_page_cites_a_path_its_reader_does_not_have():
    found = [f for page in [README, SCAFFOLD_README, *_user_pages()] for f in _cited_paths(page)]
    assert not found, "a user page cites what its reader does not have (cite the upstream source itself):\n" + \
        "\n".join(found)


def test_the_path_check_finds_a_path_outside_the_repository_and_one_that_is_not_in_it():
    page = DOCS / "memory.md"
    text = page.read_text() + "\nSee ../shared/reference/spark-memory.md and `specfleet/memory/nosuch.py`.\n"
    assert [f.split(": ", 1)[1] for f in _cited_paths(page, text)] == [
        "../shared/reference/spark-memory.md: not in the repository",
        "specfleet/memory/nosuch.py: no such path in the repository"]


def _deploys() -> set[str]:
    """The deploy files `specfleet init` writes, by name."""
    from specfleet.fleet.project import scaffold_files
    return {rel.removeprefix("deploys/").removesuffix(".py") for rel in scaffold_files() if rel.startswith("deploys/")}


def _profiles(engine: str | None = None) -> set[str]:
    from specfleet.fleet.profiles import profiles
    return {name for name, p in profiles().items() if engine in (None, p["engine"])}


LISTED = {"deploys": _deploys, "profiles": _profiles, "trtllm profiles": lambda: _profiles("trtllm"),
          "vllm profiles": lambda: _profiles("vllm")}


def _help(*command: str) -> str:
    from click.testing import CliRunner

    from specfleet.cli import main
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _lists() -> list[tuple[str, str, str, str, str]]:
    """Every list of deploys or profiles in the user's pages and the command line: (where, its text, the pattern
    whose group 1 is the list, how its names are written, what it lists). How: `items` (a, b and c), `names`
    (backticked), `files` (backticked `NAME.py`), `rows` (a table's first column, backticked)."""
    from specfleet.fleet.tunables import default_comments

    readme, index, scaffold = README.read_text(), (DOCS / "index.md").read_text(), SCAFFOLD_README.read_text()
    profiles, engines = (DOCS / "profiles.md").read_text(), (DOCS / "engines.md").read_text()
    layout = r"^    deploys/\*\.py +([^\n]+(?:\n {26}\S[^\n]*)*)"  # a project's layout: its deploys/*.py entry
    return [
        ("README.md, the project's layout", readme, layout, "items", "deploys"),
        ("README.md, Deploys", readme, r"^Deploys \(`deploys/`\): (.+?)\n\n", "files", "deploys"),
        ("README.md, Features: Profiles", readme, r"\(docs/profiles\.md\): the TensorRT-LLM profiles \((.+?)\)",
         "names", "trtllm profiles"),
        ("README.md, Features: Engines", readme, r"\(docs/engines\.md\):.+?the vLLM profiles \((.+?)\)", "names",
         "vllm profiles"),
        ("docs/index.md, Profiles", index, r"\(profiles\.md\): what each TensorRT-LLM profile serves \((.+?)\)",
         "names", "trtllm profiles"),
        ("docs/index.md, Engines", index, r"\(engines\.md\):.+?the vLLM profiles \((.+?)\)", "names",
         "vllm profiles"),
        ("docs/profiles.md, the table", profiles, r"^(\| profile \|.+?)\n\n", "rows", "trtllm profiles"),
        ("docs/profiles.md, the vLLM profiles", profiles, r"^The vLLM profiles \((.+?)\)", "names", "vllm profiles"),
        ("docs/engines.md, the vLLM profiles' table", engines, r"^## The vLLM profiles\n\n(.+?)\n\n", "rows",
         "vllm profiles"),
        ("the scaffold's README.md, the project's layout", scaffold, layout, "items", "deploys"),
        ("the description of `serves` (specfleet/defaults.py, docs/variables.md)", default_comments()["serves"],
         r"^profile this Spark serves \((.+?)\)", "items", "profiles"),
        ("specfleet init --help", _help("init"), r"the deploys (.+?) \(deploys/NAME\.py\)", "items", "deploys"),
    ]


def _names(region: str, how: str) -> list[str]:
    if how == "items":
        items = re.split(r",|\band\b", " ".join(region.split()))
        return [item.strip() for item in items if item.strip()]
    if how == "rows":
        return re.findall(r"^\| `([^`]+)` \|", region, flags=re.M)
    pattern = r"`([^`]+)\.py`" if how == "files" else r"`([^`]+)`"
    return re.findall(pattern, region)


def _list_problem(where: str, text: str, pattern: str, how: str, what: str) -> str | None:
    m = re.search(pattern, text, flags=re.M | re.S)
    if m is None:
        return f"{where}: its list of {what} is not where it was looked for ({pattern})"
    names, wanted = _names(m.group(1), how), LISTED[what]()
    missing, unknown = sorted(wanted - set(names)), sorted(set(names) - wanted)
    twice = sorted({n for n in names if names.count(n) > 1})
    if not (missing or unknown or twice):
        return None
    return (f"{where}: lists {what} as {names}" + (f"; missing {missing}" if missing else "")
            + (f"; not {what}: {unknown}" if unknown else "") + (f"; twice: {twice}" if twice else ""))


def test_every_list_of_deploys_and_profiles_is_the_codes():
    """Each list of deploys or profiles a user reads holds exactly the deploy files `specfleet init` writes, or the
    profiles of specfleet/profiles/ (of one engine where it says so)."""
    assert _deploys() >= _profiles(), "every profile has its deploy file"
    wrong = [problem for entry in _lists() if (problem := _list_problem(*entry))]
    assert not wrong, "\n".join(wrong)


def test_the_list_check_fails_without_any_one_name():
    """Taking any one name out of any of the lists fails the check, naming it."""
    for where, text, pattern, how, what in _lists():
        region = re.search(pattern, text, flags=re.M | re.S)
        assert region, where
        for name in LISTED[what]():
            cut = re.sub(rf"(?<![\w/`])`?{re.escape(name)}(?:\.py)?`?(?![\w`])", "", region.group(1), count=1)
            assert cut != region.group(1), (where, name)
            problem = _list_problem(where, text[:region.start(1)] + cut + text[region.end(1):], pattern, how, what)
            assert problem and f"missing ['{name}']" in problem, (where, name, problem)


def test_the_command_line_the_index_and_the_readme_name_every_engine():
    from specfleet.engines.catalog import ENGINES
    first = lambda page: " ".join(page.read_text().split("\n\n")[1].split())  # noqa: E731 (the first paragraph)
    for where, text in (("specfleet --help", _help()), ("docs/index.md", first(DOCS / "index.md")),
                        ("README.md", first(README))):
        missing = [engine.server for engine in ENGINES.values() if engine.server not in text]
        assert not missing, f"{where} does not name {missing}: {text[:300]}"


def _fenced(text: str) -> list[str]:
    """The fenced code blocks of a page's text, in order (their content only)."""
    return re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.M | re.S)


def test_the_gateway_page_shows_what_scrape_config_writes_for_its_fleet(fleet_file):
    """The page's example: the fleet file it shows, and `specfleet metrics scrape-config`'s output for it, header and
    all, as the command writes them."""
    from click.testing import CliRunner

    from specfleet.cli import main
    page = (DOCS / "gateway.md").read_text()
    fleet, shown = _fenced(page[page.index("## Fleet metrics"):])[:2]
    fleet_file(fleet, lock=False)
    result = CliRunner().invoke(main, ["metrics", "scrape-config", "inventory.py"])
    assert result.exit_code == 0, result.output
    assert shown == result.output, "docs/gateway.md's scrape config is not what the command writes for its fleet"
    assert shown.startswith("# ") and "`specfleet metrics scrape-config`" in shown.split("\n", 1)[0]


def test_the_bench_page_shows_what_apply_writes_into_its_fleet_file(tmp_path):
    """The page's --apply example: its fleet file, and the diff --apply prints for the best variant it names (the
    vars it sets, the comments kept), as bench/apply.py makes them."""
    from specfleet.bench.apply import fleet_diff, with_best_variant
    page = (DOCS / "status-and-bench.md").read_text()
    section = page[page.index("### `--apply GROUP`"):]
    before, shown = _fenced(section)[:2]
    variant = re.search(r"best variant is `(([a-z0-9_]+):([a-z_]+)=([0-9]+))`, run with `--apply ([a-z_]+)`", section)
    assert variant, "the page names the best variant and the group of its example"
    name, profile, key, value, group = variant.groups()
    from specfleet.engines.catalog import engine_of
    from specfleet.fleet.profiles import profiles
    engine = engine_of(profiles()[profile])
    base = {"variant": "b", "profile": "b", "draft_len": 0, "overrides": {}, "error": None,
            "buckets": {"short": {"speedup": 1.0}}}
    best = {"variant": name, "profile": profile, "draft_len": int(value), "error": None,
            "overrides": {engine.options_var: {"speculative_config": {key: int(value)}}},
            "buckets": {"short": {"speedup": 1.4}}}
    path = tmp_path / "fleet.yml"
    path.write_text(before)
    chosen, old, new = with_best_variant([base, best], path, group)
    assert chosen is best and new is not None
    assert fleet_diff(Path("inventory/fleet.yml"), old, new, name) == shown, (
        "docs/status-and-bench.md's --apply diff is not what --apply prints for its fleet file")
    assert f"+        serves: {profile}" in shown and "#" in shown
