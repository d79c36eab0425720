"""Session fixtures of the VM tier: one fleet, one Hub stand-in, the controller's wheelhouse (the guests' PyPI
mirror), the stand-in image; always torn down.

Figures measured by the tests go into FIGURES and are printed as a table at the end of the session, followed
by the per-phase table (PHASES: each VM-tier module and each piece of session work, and the VM-tier total)
(benchmarks print figures; nothing here asserts on wall time)."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

import specfleet_lab
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.hub_standin import HubStandin
from tests.vm.phases import PhaseClock

FIGURES: list[tuple[str, str]] = []
SESSION_FLEETS: list = []  # the session fleet once booted (paused_session_fleet stops its guests' CPUs)
PHASES = PhaseClock()
HERE = Path(__file__).resolve().parent
#: arch -> lab.Prebuild: the guest image + stand-in tar of another architecture than the session fleet's, built in
#: the background from the start of the session (pytest_collection_finish) while the x86_64 modules run.
PREBUILDS: dict = {}
#: The modules that boot guests of another architecture, and that architecture.
ARCH_MODULES = {"test_arm64.py": "arm64"}


def figure(name: str, value: str) -> None:
    FIGURES.append((name, value))


def cache_dir() -> Path:
    return Path(os.environ.get("SPECFLEET_CACHE_DIR") or Path.home() / ".cache" / "specfleet")


def session_work(name: str):
    """Time a session fixture's setup (or teardown) as its own phase, not as part of the module that first
    needed it. (A pytest_fixture_setup hook here would not see session fixtures: their node is the session,
    whose hooks come from the root conftest only.)"""
    return PHASES.session_work(name)


@pytest.fixture(scope="session")
def lab_driver():
    """What runs the session fleet's hosts: SPECFLEET_LAB_DRIVER, else containers (QEMU, with one line saying why,
    where they cannot run). Closed at the session's end, once every fleet is down (the container engine stops)."""
    drv = specfleet_lab.choose(None, arches=["x86_64"], session=True,
                               say=lambda line: (print(line), figure("lab driver", line)))
    figure("lab driver of the session fleet", drv.name)
    try:
        yield drv
    finally:
        with session_work("session teardown: lab driver"):
            drv.close()


@pytest.fixture(scope="session")
def qemu_driver(lab_driver):
    """The QEMU driver, for the modules that need a kernel of their own (pytest.mark.kernel, docs/dev/lab.md)."""
    return lab_driver if lab_driver.name == "qemu" else specfleet_lab.choose("qemu", session=True)


class Standins:
    """The stand-ins the controller serves to the hosts of one driver (its bind address): the Hub, and the guests'
    PyPI mirror (the wheelhouse: the deploy's pinned hub client and its dependencies, downloaded once and cached;
    None when the download failed, one line printed: the hosts then use pip's default index)."""

    def __init__(self, bind: str):
        with session_work(f"session setup: stand-ins on {bind}"):
            self.hub = HubStandin(bind=bind, port=0).__enter__()
            house = wheelhouse_mod.prepare(cache_dir(), say=lambda line: (print(line), figure("wheelhouse", line)))
            self.wheelhouse = None
            if house is not None:
                figure("prepare: wheelhouse " + ("download (cold)" if house.downloaded else "(cached)"),
                       f"{house.seconds:.1f} s")
                self.wheelhouse = wheelhouse_mod.WheelhouseServer(list(house.dirs.values()), bind=bind, port=0,
                                                                  arches=house.arches).start()

    def stop(self) -> None:
        if self.wheelhouse is not None:
            figure("wheelhouse: wheel files served to the hosts", str(self.wheelhouse.files_served()))
            self.wheelhouse.stop()
        self.hub.__exit__(None, None, None)


@pytest.fixture(scope="session")
def standins_for():
    """driver -> its Standins, started on first use (bound to the driver's bind address), stopped at the end."""
    started: dict[str, Standins] = {}

    def get(driver) -> Standins:
        if driver.bind_address not in started:
            started[driver.bind_address] = Standins(driver.bind_address)
        return started[driver.bind_address]

    try:
        yield get
    finally:
        for s in started.values():
            s.stop()


@pytest.fixture(scope="module")
def standins(request, standins_for):
    """The stand-ins the hosts of this module's own fleet reach (driver_of: its driver's bind address)."""
    return standins_for(driver_of(request))


@pytest.fixture(scope="session")
def hub(lab_driver, standins_for):
    return standins_for(lab_driver).hub


@pytest.fixture(scope="session")
def wheelhouse(lab_driver, standins_for):
    return standins_for(lab_driver).wheelhouse


@pytest.fixture(scope="session")
def standin_rootfs() -> Path:
    """The trtllm-serve stand-in's rootfs tar that the session fleet's hosts load (lab_inventory) and the registry
    stand-in serves: built here on a cold cache (mmdebstrap), so that a test of it runs cold or warm, before or
    after the fleet is prepared (the build is locked and cached: it happens once)."""
    with session_work("session setup: stand-in rootfs tar (build unless cached)"):
        start = time.monotonic()
        tar = lab.standin_tarball(cache_dir(), "x86_64")
        figure("stand-in rootfs tar (x86_64, built unless cached)", f"{time.monotonic() - start:.1f} s")
        return tar


@pytest.fixture(scope="session")
def vm_fleet(tmp_path_factory, request, lab_driver):
    with session_work("session setup: vm_fleet (image build + boot)"):
        return _boot_fleet(tmp_path_factory, request, lab_driver)


def _boot_fleet(tmp_path_factory, request, driver):
    count = int(os.environ.get("SPECFLEET_VM_COUNT", "3"))
    workdir = tmp_path_factory.mktemp("fleet")
    # image build timings: cold (if not cached yet) and cached, side by side
    first = specfleet_lab.build_image(cache_dir())
    figure("guest image build " + ("(cold)" if first.built else "(cached)"), f"{first.seconds:.1f} s")
    second = specfleet_lab.build_image(cache_dir())
    figure("guest image build (cached)", f"{second.seconds:.2f} s")
    start = time.monotonic()
    try:
        # on a shared network of its own: a gateway host joins it in --full
        fleet = specfleet_lab.up(count=count, workdir=workdir, cache_dir=cache_dir(), lan=True, driver=driver)
    except BaseException:
        specfleet_lab.down(workdir)
        raise
    figure(f"boot {count} {driver.name} hosts to SSH + systemd running", f"{time.monotonic() - start:.1f} s")
    SESSION_FLEETS.append(fleet)

    def down():
        with PHASES.session_work("session teardown: fleet down"):
            try:
                fleet.resume()  # a frozen host would not act on down()'s stop
            finally:
                specfleet_lab.down(workdir)  # whatever happened above

    request.addfinalizer(down)
    return fleet


@pytest.fixture(scope="session")
def lab_inventory(vm_fleet, hub, wheelhouse):
    with session_work("session setup: lab_inventory (prepare + lock)"):
        return _prepare_lab(vm_fleet, hub, wheelhouse)


def _prepare_lab(vm_fleet, hub, wheelhouse):
    start = time.monotonic()
    n_cas = lab.trust_controller_cas(vm_fleet)
    index_url = wheelhouse.index_url_for(vm_fleet.controller_address) if wheelhouse else None
    mirrored = [g for g in vm_fleet.guests if wheelhouse and wheelhouse_mod.guest_arch(g) in wheelhouse.arches]
    lab.configure_guest_pip(vm_fleet, index_url, cert=n_cas > 0, guests=mirrored)  # others: as trust_controller_cas left it
    others = [g for g in vm_fleet.guests if g not in mirrored]
    if others and wheelhouse:
        figure("wheelhouse: guests left on pip's default index (arch)", ", ".join(g.name for g in others))
    figure("prepare: CAs + pip mirror in every guest", f"{time.monotonic() - start:.1f} s")
    seconds = lab.load_standin_image(vm_fleet, cache_dir())
    figure("prepare: load stand-in image per guest (streamed into docker import -)",
           ", ".join(f"{name} {s:.1f} s" for name, s in sorted(seconds.items())))
    figure("prepare: build + load stand-in image into every guest", f"{time.monotonic() - start:.1f} s")
    return lab.write_ci_inventory(vm_fleet, hub.port, vm_fleet.workdir / "ci-inventory.yml")


@contextlib.contextmanager
def paused_session_fleet():
    """Freeze the session fleet's idle hosts (Fleet.pause) for a module that boots its own fleet: on 2 cores, an
    emulated guest gets the CPU time the idle hosts would otherwise burn. Always resumed afterwards, also when the
    module fails."""
    fleets = list(SESSION_FLEETS)
    paused = [name for f in fleets for name in f.pause()]
    if paused:
        figure("session fleet paused while a module with hosts of its own ran", ", ".join(paused))
    try:
        yield paused
    finally:
        for f in fleets:
            f.resume()


def driver_of(request):
    """The driver of a module's own hosts: QEMU where it needs a kernel of its own (pytest.mark.kernel naming its
    ledger row in docs/dev/lab.md), else the session's."""
    needs_kernel = request.node.get_closest_marker("kernel") is not None
    return request.getfixturevalue("qemu_driver" if needs_kernel else "lab_driver")


def own_guests(tmp_path_factory, request, name: str, what: str, count: int = 2, **up):
    """`count` hosts of a module's own (specfleet_lab.up(count=count, **up)) on the module's driver (driver_of), the
    session fleet paused meanwhile: they are undone at module teardown, also on failure or SIGTERM. Prints the boot
    time as `<what>`."""
    pause = contextlib.ExitStack()
    pause.enter_context(paused_session_fleet())
    request.addfinalizer(pause.close)
    workdir = tmp_path_factory.mktemp(name)
    request.addfinalizer(lambda: specfleet_lab.down(workdir))
    start = time.monotonic()
    fleet = specfleet_lab.up(count=count, workdir=workdir, cache_dir=cache_dir(), driver=driver_of(request), **up)
    figure(f"{what} ({fleet.driver.name})", f"{time.monotonic() - start:.1f} s")
    return fleet


def _in_vm_tier(item) -> bool:
    return Path(str(item.path)).resolve().is_relative_to(HERE)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Per-module wall time (called for every item of the run: only the VM tier's are counted)."""
    if not _in_vm_tier(item):
        return (yield)
    PHASES.item_start(item.nodeid.split("::")[0])
    try:
        return (yield)
    finally:
        PHASES.item_end()


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        width = max(len(name) for name, _ in FIGURES)
        terminalreporter.write_sep("=", "specfleet VM-tier figures (measured in this run)")
        for name, value in FIGURES:
            terminalreporter.write_line(f"  {name.ljust(width)}  {value}")
    table = PHASES.table()
    if table:
        terminalreporter.write_sep("=", "specfleet VM-tier phases (wall seconds per module / session work)")
        for line in table:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(items):
    """The fleet up/down test brings up its own guests: run it before the session fleet boots; the bench
    converges and switches the fleet itself: run it after the CI sequence, faults and rollouts; the pair link's,
    the pair's and the memory module's guests boot after it (the session fleet paused meanwhile). The arm64
    module comes last: its image and stand-in are built in the background meanwhile (PREBUILDS). Only this
    directory's modules are placed: tests/unit has a test_bench.py and a test_pair_link.py of its own."""
    here = Path(__file__).resolve().parent

    def vm_module(item) -> str | None:
        return item.path.name if item.path.resolve().parent == here else None

    order = {"test_vm_fleet.py": 0, "test_bench.py": 2, "test_engines_lab.py": 2, "test_pair_link.py": 3, "test_pair.py": 3, "test_memory_oom.py": 3}
    items.sort(key=lambda item: order.get(vm_module(item), 1) + (10 if vm_module(item) in ARCH_MODULES else 0))


def pytest_collection_finish(session):
    """Start the background build of each other architecture a selected (not skipped) test will boot."""
    wanted = {ARCH_MODULES[item.path.name] for item in session.items
              if item.path.name in ARCH_MODULES and not item.get_closest_marker("skip")}
    for arch in sorted(wanted - set(PREBUILDS)):
        start_prebuild(arch, session.config)


def start_prebuild(arch: str, config):
    workdir = Path(config._tmp_path_factory.getbasetemp()) / "prebuild" if hasattr(config, "_tmp_path_factory") \
        else Path("/tmp") / f"specfleet-prebuild-{os.getpid()}"
    PREBUILDS[arch] = lab.Prebuild(arch, cache_dir(), workdir)
    return PREBUILDS[arch]


def pytest_sessionfinish(session):
    for prebuild in PREBUILDS.values():  # interrupted before its module joined it: remove its partial build
        prebuild.stop()
