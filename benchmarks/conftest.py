"""Benchmarks print figures (never assert a time): collected here, shown at the end of the run."""

FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.write_sep("=", "specfleet benchmarks (measured side by side in this run)")
        for line in FIGURES:
            terminalreporter.write_line(f"  {line}")
