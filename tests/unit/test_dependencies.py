"""Dependencies: the runtime ones (pyproject.toml, and the lab's) and the `infra` extra as ranges from the version CI runs to below its next
minor (pyinfra and pydantic are used through internals, so a minor release may break them); what CI installs
(constraints.txt, `pip install -c` in tests/install-deps.sh) pinned exactly, at the lower bound of each range."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1].parent


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[0-9][0-9A-Za-z.]*", version), f"not an exact pin: {line!r}"
            pins[_norm(name)] = version
    return pins


def _runtime() -> list[Requirement]:
    """What users install: the runtime dependencies (specfleet's and the lab's) and the `infra` extra, which a fleet
    project's tests/infra runs with (`pip install 'specfleet[infra]'`)."""
    out = []
    for project in (ROOT / "pyproject.toml", ROOT / "lab" / "pyproject.toml"):
        out += [Requirement(r) for r in tomllib.loads(project.read_text())["project"]["dependencies"]]
    return out + _extra("infra")


def _extra(name: str) -> list[Requirement]:
    return [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            .get("optional-dependencies", {}).get(name, [])]


def test_runtime_dependencies_are_ranges_to_below_the_next_minor_pinned_by_the_constraints():
    pins = _constraints()
    reqs = _runtime()
    assert len(reqs) >= 10
    for req in reqs:
        specs = {s.operator: Version(s.version) for s in req.specifier}
        assert set(specs) == {">=", "<"}, f"{req}: give a range >=X,<next minor"
        low, high = specs[">="], specs["<"]
        assert high == Version(f"{low.major}.{low.minor + 1}"), f"{req}: the upper bound is the next minor of {low}"
        assert pins.get(_norm(req.name)) == str(low), f"{req}: constraints.txt must pin {req.name}=={low}"


def test_the_test_tools_are_pinned_as_ci_installs_them():
    pins = _constraints()
    test = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    for req in map(Requirement, test):
        (spec,) = req.specifier
        assert spec.operator == "==" and pins.get(_norm(req.name)) == spec.version, req


def test_the_infra_extra_holds_what_tests_infra_imports():
    """A project's tests/infra imports specfleet.testinfra, which runs under pytest and connects with testinfra."""
    assert {_norm(r.name) for r in _extra("infra")} == {"pytest", "pytest-testinfra"}


def test_install_deps_installs_through_the_constraints():
    assert "-c constraints.txt" in (ROOT / "tests" / "install-deps.sh").read_text()
