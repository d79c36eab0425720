"""Facts with one definition stay that way: how a unit's main process is found (`layout.main_pid`) is written out
in layout.py only, across the package, the lab and every test tier."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFINED_IN = ROOT / "specfleet" / "host" / "layout.py"
TREES = ("specfleet", "lab", "tests", "benchmarks")


def written_out(needle: str, skip: Path) -> list[str]:
    """Each file under TREES (but `skip` and this test) whose text holds `needle`."""
    return sorted(str(p.relative_to(ROOT)) for tree in TREES for p in (ROOT / tree).rglob("*")
                  if p.is_file() and p.suffix in (".py", ".sh", ".j2", ".yml", ".yaml") and "__pycache__" not in p.parts
                  and p not in (skip, Path(__file__).resolve()) and needle in p.read_text(errors="replace"))


def test_a_units_main_pid_is_found_in_one_place():
    assert "MainPID" in DEFINED_IN.read_text()  # the definition is where this test looks for it
    assert written_out("MainPID", DEFINED_IN) == [], "use specfleet.host.layout.main_pid(unit)"


def test_the_scan_finds_a_copy(tmp_path):
    """The scan can fail: it finds the definition's own file when that is not skipped."""
    assert written_out("MainPID", tmp_path) == [str(DEFINED_IN.relative_to(ROOT))]


def test_templates_take_dockers_unit_name_from_layout():
    """The serving unit's Requires=/After= name docker's unit through layout.DOCKER_UNIT (rendered the same)."""
    from specfleet.host.layout import DOCKER_UNIT

    templates = list((ROOT / "specfleet").glob("*/templates/*.j2"))
    assert [p.name for p in sorted(templates) if DOCKER_UNIT in p.read_text()] == []
    assert any("{{ docker_unit }}" in p.read_text() for p in templates)
