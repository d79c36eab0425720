"""The README names both newcomer commands, and CI runs the README's test command. The rest of what the README says
is checked with the user's manual in tests/unit/test_docs.py (its length, its links into docs/)."""

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
