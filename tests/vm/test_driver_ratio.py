"""--full benchmark: the same scenarios on both drivers, side by side in one run, and the container-to-QEMU ratio of
their wall times: three hosts' first converge (the model pulled from the Hub stand-in, the server started and gated),
a no-op converge, and a rollout of the three (batches 1,1: one host at a time). Each driver's hosts are a fleet of
its own; the containers go first, then the QEMU guests. The module runs in the QEMU modules' process
(pytest.mark.qemu_guests: tests/tiers.sh), where no session fleet shares the CPU. Figures only: the speed-up is printed, never
asserted (a loaded machine changes it), but each scenario must succeed on both."""

from __future__ import annotations

import time

import pytest

import specfleet_lab
from tests.vm import lab
from tests.vm.conftest import _prepare_lab, cache_dir, figure, paused_session_fleet
from tests.vm.hub_standin import HubStandin

pytestmark = [pytest.mark.vm, pytest.mark.full, pytest.mark.qemu_guests]

EAGLE = "nvidia/gpt-oss-120b-Eagle3-long-context"
SCENARIOS = ("boot 3 hosts + prepare", "first converge", "no-op converge", "rollout of 3 hosts")
SECONDS: dict[str, dict[str, float]] = {}


def _timed(driver: str, scenario: str, step):
    start = time.monotonic()
    out = step()
    SECONDS.setdefault(driver, {})[scenario] = time.monotonic() - start
    figure(f"driver ratio: {scenario} ({driver})", f"{SECONDS[driver][scenario]:.1f} s")
    return out


def _scenarios(driver, standins, workdir) -> None:
    def boot():
        fleet = specfleet_lab.up(count=3, workdir=workdir, cache_dir=cache_dir(), driver=driver)
        return fleet, _prepare_lab(fleet, standins.hub, standins.wheelhouse)

    fleet, inventory = _timed(driver.name, SCENARIOS[0], boot)
    first = _timed(driver.name, SCENARIOS[1], lambda: lab.run_pyinfra(inventory, "eagle3"))
    assert first.returncode == 0, first.output()[-3000:]
    again = _timed(driver.name, SCENARIOS[2], lambda: lab.run_pyinfra(inventory, "eagle3"))
    assert again.returncode == 0 and again.changed == {}, (again.changed, again.output()[-3000:])
    inv_b = lab.with_vars(inventory, workdir / "release-b.yml", draft_revision=HubStandin.commits(EAGLE)[0])
    rollout = _timed(driver.name, SCENARIOS[3], lambda: lab.run_specfleet(
        "rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_b))
    assert rollout.returncode == 0 and "result: SUCCESS" in rollout.stdout, rollout.stderr[-3000:]
    answers = [lab.guest_curl_completion(g)["choices"][0]["text"].strip() for g in fleet.guests]
    assert all(answers), answers


@pytest.mark.parametrize("which", ["container", "qemu"])
def test_the_same_scenarios_on_each_driver(which, lab_driver, qemu_driver, standins_for, tmp_path_factory):
    driver = {"container": lab_driver, "qemu": qemu_driver}[which]
    if driver.name != which:
        pytest.skip(f"no {which} driver on this machine (the session's is {lab_driver.name})")
    workdir = tmp_path_factory.mktemp(f"ratio-{which}")
    with paused_session_fleet():
        try:
            _scenarios(driver, standins_for(driver), workdir)
        finally:
            specfleet_lab.down(workdir)
    if which == "qemu" and "container" in SECONDS:
        for scenario in SCENARIOS:
            figure(f"driver ratio: {scenario}: container / QEMU wall time",
                   f"{SECONDS['container'][scenario] / SECONDS['qemu'][scenario]:.3f} "
                   f"({SECONDS['container'][scenario]:.1f} s / {SECONDS['qemu'][scenario]:.1f} s)")
