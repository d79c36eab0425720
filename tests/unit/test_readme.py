"""The README names both newcomer commands, CI runs the README's test command, and the first-fleet walkthroughs (the
README's and the project's own) lock before anything reads the lock. The rest of what the README says is checked with
the user's manual in tests/unit/test_docs.py (its length, its links into docs/, its lists of deploys and profiles)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_names_both_newcomer_commands_and_ci_runs_one():
    assert "bash tests/vm/try.sh" in README and "bash tests/run.sh" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash tests/run.sh" in ci


def test_readme_points_to_ci_and_the_lab():
    section = README[README.index("## CI and the lab"):]
    assert "(docs/dev/ci.md)" in section and "(docs/dev/lab.md)" in section


def _walkthrough_commands(text: str) -> list[str]:
    """The commands of a page's walkthrough blocks, in order (indented lines that run specfleet, pyinfra or pytest)."""
    return [line.split("#", 1)[0].strip() for line in text.splitlines()
            if re.match(r" {4}(specfleet|pyinfra|pytest) ", line)]


def test_the_first_fleet_walkthroughs_lock_before_they_check_render_or_converge():
    """`specfleet check`, `render` and a converge read the pins from the lock file: a first fleet runs `specfleet lock`
    before any of them (the README's walkthrough and the one of the README `specfleet init` writes)."""
    for where, text in (("README.md, The first real fleet", README[README.index("## The first real fleet"):]),
                        ("specfleet/scaffold/README.md", (ROOT / "specfleet/scaffold/README.md").read_text())):
        commands = _walkthrough_commands(text)
        lock = next((i for i, c in enumerate(commands) if c.startswith("specfleet lock ")), None)
        reads = [i for i, c in enumerate(commands) if c.startswith(("specfleet check ", "specfleet render ",
                                                                     "pyinfra "))]
        assert reads, (where, commands)
        assert lock is not None and lock < reads[0], f"{where}: `specfleet lock` comes first: {commands}"
