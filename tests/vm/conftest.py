"""Session fixtures of the VM tier: one fleet, one Hub stand-in, the stand-in image; always torn down.

Figures measured by the tests go into FIGURES and are printed as a table at the end of the session
(benchmarks print figures; nothing here asserts on wall time)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specfleet import vm
from tests.vm import lab
from tests.vm.hub_standin import HubStandin

FIGURES: list[tuple[str, str]] = []


def figure(name: str, value: str) -> None:
    FIGURES.append((name, value))


def cache_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_CACHE_DIR") or Path.home() / ".cache" / "specfleet")


@pytest.fixture(scope="session")
def hub():
    with HubStandin(bind="127.0.0.1", port=0) as server:
        yield server


@pytest.fixture(scope="session")
def vm_fleet(tmp_path_factory, request):
    count = int(os.environ.get("SPECFLEET_VM_COUNT", "3"))
    workdir = tmp_path_factory.mktemp("fleet")
    # image build timings: cold (if not cached yet) and cached, side by side
    first = vm.build_image(cache_dir())
    figure("guest image build " + ("(cold)" if first.built else "(cached)"), f"{first.seconds:.1f} s")
    second = vm.build_image(cache_dir())
    figure("guest image build (cached)", f"{second.seconds:.2f} s")
    start = time.monotonic()
    try:
        fleet = vm.up(count=count, workdir=workdir, cache_dir=cache_dir())
    except BaseException:
        vm.down(workdir)
        raise
    figure(f"boot {count} guests to SSH + systemd running", f"{time.monotonic() - start:.1f} s")
    request.addfinalizer(lambda: vm.down(workdir))
    return fleet


@pytest.fixture(scope="session")
def lab_inventory(vm_fleet, hub):
    start = time.monotonic()
    lab.trust_controller_cas(vm_fleet)
    lab.load_standin_image(vm_fleet, cache_dir())
    figure("prepare: build + load stand-in image into every guest", f"{time.monotonic() - start:.1f} s")
    return lab.write_ci_inventory(vm_fleet.inventory_path, hub.port, vm_fleet.workdir / "ci-inventory.yml")


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    width = max(len(name) for name, _ in FIGURES)
    terminalreporter.write_sep("=", "specfleet VM-tier figures (measured in this run)")
    for name, value in FIGURES:
        terminalreporter.write_line(f"  {name.ljust(width)}  {value}")


def pytest_collection_modifyitems(items):
    """The fleet up/down test brings up its own guests: run it before the session fleet boots."""
    items.sort(key=lambda item: 0 if item.path.name == "test_vm_fleet.py" else 1)
