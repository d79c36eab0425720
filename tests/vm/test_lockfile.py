"""With a lock file, a converged fleet re-converges with the Hub unreachable: the plan takes
every pin from `<fleet>.lock`, nothing asks the Hub which commit `main` is, nothing is fetched, nothing changes."""

from __future__ import annotations

import pytest

from specfleet.pins.lockfile import lock_path, read_lock
from tests.vm import lab
from tests.vm.hub_standin import HubStandin

pytestmark = pytest.mark.vm

NOWHERE = "http://127.0.0.1:9"  # nothing listens there (discard port)


@pytest.mark.full  # CI keeps the unit tests of the lock; this VM scenario runs with --full
def test_converged_fleet_reconverges_with_the_hub_unreachable(vm_fleet, lab_inventory, hub: HubStandin):
    first = lab.run_pyinfra(lab_inventory, "eagle3")
    assert first.returncode == 0, first.output()[-4000:]
    offline = lab.with_vars(lab_inventory, vm_fleet.workdir / "hub-unreachable.yml", hub_endpoint=NOWHERE,
                            controller_hub_endpoint=NOWHERE, tiktoken_base_url=f"{NOWHERE}/encodings")
    assert read_lock(lock_path(offline)) == read_lock(lock_path(lab_inventory)), \
        "the copy's lock is the original's: `specfleet lock` had nothing to add and asked nobody"
    hub.reset_log()
    run = lab.run_pyinfra(offline, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]
    assert run.changed == {}, f"re-converge with the Hub unreachable changed: {run.changed}"
    assert hub.total_bytes() == 0 and hub.requests() == [], f"the Hub stand-in was contacted: {hub.requests()}"
    plan = lab.run_specfleet("plan", "inventory.py", "deploys/eagle3.py", inventory=offline)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert plan.stdout.count("nothing to do") == len(vm_fleet.guests), plan.stdout
