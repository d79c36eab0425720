"""Test-run wide options: the `--full` tier and SIGTERM handling.

`--full` (tests/run.sh --full) also runs the tests marked `full`: the heaviest VM scenarios, kept out of CI's
default tier for time. A SIGTERM (CI's time limit) is turned into KeyboardInterrupt, once, so pytest unwinds and
the session fixtures tear the VM fleet down; a later one does not interrupt that teardown."""

from __future__ import annotations

import signal

import pytest


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="also run the tests marked full (the heaviest VM scenarios)")


def pytest_configure(config):
    config.addinivalue_line("markers", "full: heaviest VM scenarios, run only with --full (tests/run.sh --full)")

    stopping = []

    def _interrupt(signum, frame):
        # once only: a second SIGTERM (a whole process group signalled, and tests/full_tier.sh passing it on too)
        # must not break off the teardown the first one started
        if stopping:
            print(f"signal {signum}: already stopping, the VM fleet's teardown goes on", flush=True)
            return
        stopping.append(signum)
        raise KeyboardInterrupt(f"signal {signum}: stopping the test run and tearing the VM fleet down")

    signal.signal(signal.SIGTERM, _interrupt)
    config._specfleet_sigterm = _interrupt


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test that leaves another SIGTERM handler behind (code run in-process that installs its own) would turn
    CI's SIGTERM into that handler's exception, which pytest records as one failed test and goes on: the handler is
    put back, and the test fails saying so."""
    yield
    ours = getattr(item.config, "_specfleet_sigterm", None)
    if ours is not None and signal.getsignal(signal.SIGTERM) is not ours:
        left = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, ours)
        pytest.fail(f"this test left a SIGTERM handler behind ({left!r}); the test run's own is restored", pytrace=False)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--full"):
        return
    skip = pytest.mark.skip(reason="heaviest VM scenario: runs with tests/run.sh --full")
    for item in items:
        if "full" in item.keywords:
            item.add_marker(skip)
