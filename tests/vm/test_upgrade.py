"""Upgrading specfleet does what the upgrade notes (docs/upgrades.md) say: the fleet converged by BASE (the last commit with the
flat layout and rendering 2, run from a git worktree of that commit) is converged again by this tree. BASE renders with rendering 2 and this tree with render.RENDERING, whose bumps (3 and 4,
unified memory) change the release ids on the lab's TensorRT-LLM version: `plan` names that as its own reason on every
host, the converge switches each host once, and a second converge changes and restarts nothing. Within one rendering
the rendered files and release ids are pinned byte for byte by tests/unit/test_golden_render.py (nothing restarts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specfleet.serving.render import RENDERING
from tests.vm import lab
from tests.vm.conftest import figure
from tests.vm.test_ci_sequence import started_at
from tests.vm.test_rollout import serving_inventory

pytestmark = [pytest.mark.vm, pytest.mark.full]

BASE = "1722c52"  # the last commit before the layers, the host layout and the lab out of the wheel
BASE_RENDERING = 2  # render.RENDERING at BASE
VARS_AFTER_BASE = ("memory_reserve_gb",)  # of the lab's vars (lab.ci_vars), those BASE does not know (it refuses them)


@pytest.fixture(scope="module")
def base_tree(tmp_path_factory):
    tree = tmp_path_factory.mktemp("upgrade") / "base"
    subprocess.run(["git", "-C", str(lab.ROOT), "worktree", "add", "--detach", str(tree), BASE], check=True,
                   capture_output=True)
    yield tree
    subprocess.run(["git", "-C", str(lab.ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _converge_with(tree, inventory) -> lab.PyinfraRun:
    """`pyinfra inventory.py deploys/eagle3.py` run in `tree` (its own specfleet package comes first on sys.path)."""
    env = {"PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "pyinfra", "-y", "--json", "inventory.py", "deploys/eagle3.py"]
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=2400,
                          env={**lab.os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": lab.STANDIN_TOKEN,
                               "PYINFRA_PROGRESS": "off", **env})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _without_vars(inventory: Path, out: Path, fleet_vars: tuple = ()) -> Path:
    """The fleet file without the hosts' fleet_address and without `fleet_vars` (of all.vars), locked."""
    inv = yaml.safe_load(inventory.read_text())
    for group in inv["all"].get("children", {}).values():
        for host_vars in (group.get("hosts") or {}).values():
            (host_vars or {}).pop("fleet_address", None)
    for key in fleet_vars:
        inv["all"].get("vars", {}).pop(key, None)
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    Path(f"{out}.lock").write_text(Path(f"{inventory}.lock").read_text())
    return lab.write_lock(out)


def test_an_upgrade_switches_each_host_once_for_its_rendering_and_then_nothing(vm_fleet, lab_inventory, base_tree):
    # what the fleet serves now: the lab's release, or in --full the one the rollout tests left (C)
    lab_inventory = serving_inventory(lab_inventory)
    # the lab's guests have a fleet_address (the shared network) that the old tree does not know (it refuses unknown
    # vars); without a gateway group it changes nothing, so both trees converge the fleet file without it. The old
    # tree's also lacks the vars added after BASE, as a fleet file of that time did (the upgrade then adds them)
    lab_inventory = _without_vars(lab_inventory, lab_inventory.with_name("upgrade.yml"))
    base_inventory = _without_vars(lab_inventory, lab_inventory.with_name("upgrade-base.yml"), VARS_AFTER_BASE)
    old = _converge_with(base_tree, base_inventory)  # the fleet as BASE serves it: its own rendering's release ids
    assert "specfleet/host/layout.py" not in old.stdout  # the old tree knows nothing of the layout module
    before = started_at(vm_fleet)
    assert all(before.values()), before
    plan = lab.run_specfleet("plan", "inventory.py", "deploys/eagle3.py", inventory=lab_inventory)
    reason = f"specfleet renders differently: rendering {BASE_RENDERING} -> {RENDERING} (docs/upgrades.md)"
    assert plan.returncode == 10 and plan.stdout.count(reason) == len(vm_fleet.guests), plan.stdout + plan.stderr
    run = lab.run_pyinfra(lab_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]
    after = started_at(vm_fleet)
    assert all(after[h] != before[h] for h in before), (before, after)  # each host switched to the new release
    again = lab.run_pyinfra(lab_inventory, "eagle3")
    assert again.returncode == 0 and again.changed == {}, again.changed
    assert started_at(vm_fleet) == after, "a second converge after the upgrade restarted a container"
    for guest in vm_fleet.guests:  # and each host serves its release
        assert lab.guest_curl_completion(guest)["choices"][0]["text"].strip(), guest.name
    figure(f"upgrade from {BASE} (rendering {BASE_RENDERING} -> {RENDERING}): hosts switched / operations "
           "the upgrade's converge changed / the next one changed", f"{len(after)} / "
           f"{sum(len(v) for v in run.changed.values())} / {sum(len(v) for v in again.changed.values())}")
