"""The controller benchmark (benchmarks/controller.py) for N = 10 and 100, plus 1,000 with --full.

Prints CPU per host, peak memory and the ratio to pyinfra's own one-fact, one-operation deploy; asserts no time
(a loaded 2-core CI box would make any bound flaky), only that every measured run converged."""

from benchmarks.conftest import FIGURES
from benchmarks.controller import KINDS, measure, report


def test_controller_cost_per_host(request):
    ns = [10, 100] + ([1000] if request.config.getoption("--full", default=False) else [])
    rows = measure(ns)
    assert [(r["kind"], r["n"]) for r in rows] == [(k, n) for n in ns for k in KINDS]
    FIGURES.append("controller CPU per host on pyinfra's @fake connector (benchmarks/controller.py):")
    FIGURES.extend("  " + line for line in report(rows))
