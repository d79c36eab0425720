"""The README documents every variable of the packaged defaults (specfleet/defaults.py), and nothing else, with its comment."""

import re
from pathlib import Path

from specfleet.tunables import default_comments, load_defaults

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_var_in_readme_table_and_back():
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \| `[^|]*` \| ([^|]+) \|$", README, flags=re.M))
    defaults = load_defaults()
    assert set(rows) == set(defaults), (set(rows) ^ set(defaults))
    comments = default_comments()
    for name, text in rows.items():
        assert text.strip() == comments[name], name


def test_every_default_has_a_comment():
    assert all(default_comments()[name] for name in load_defaults())


def test_readme_names_both_newcomer_commands_and_ci_runs_one():
    assert "bash tests/vm/try.sh" in README and "bash tests/run.sh" in README
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "bash tests/run.sh" in ci


def test_specfleet_vars_prints_the_readme_table():
    from click.testing import CliRunner

    from specfleet.cli import main
    out = CliRunner().invoke(main, ["vars"]).output
    table = [line for line in out.splitlines() if line.startswith("| `")]
    assert table and all(line in README.splitlines() for line in table)
