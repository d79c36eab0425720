"""Upgrading specfleet restarts nothing (issue 17, point 7): the fleet converged by the last release before the
redesign (BASE, run from a git worktree of that commit) is converged again by this tree. The rendered files and
release ids are pinned byte for byte by tests/unit/test_golden_render.py; this shows it on real guests: the
containers keep their start time, the gate is not re-run, and what changes is the host tools only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.vm import lab
from tests.vm.conftest import figure
from tests.vm.test_ci_sequence import started_at
from tests.vm.test_rollout import serving_inventory

pytestmark = [pytest.mark.vm, pytest.mark.full]

BASE = "1722c52"  # main before issue 17 (the layers, the host layout, the lab out of the wheel)
HOST_TOOL_WRITES = ("Install specfleet-host", "Install fetch-model", "Install layout.py", "Install hostlib.py",
                    "Install release_state.py", "Install drain.py", "Install gateway-agent",  # issue 18
                    "Take the run lock", "Release the run lock")  # a converge with work takes the host's run lock


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


def _without_fleet_addresses(inventory: Path, out: Path) -> Path:
    inv = yaml.safe_load(inventory.read_text())
    for group in inv["all"].get("children", {}).values():
        for host_vars in (group.get("hosts") or {}).values():
            (host_vars or {}).pop("fleet_address", None)
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    Path(f"{out}.lock").write_text(Path(f"{inventory}.lock").read_text())
    return lab.write_lock(out)


def test_a_converge_after_the_upgrade_restarts_nothing(vm_fleet, lab_inventory, base_tree):
    # what the fleet serves now: the lab's release, or in --full the one the rollout tests left (C); converging
    # that with the old tree switches nothing, so this test costs converges, not a fleet-wide switch
    lab_inventory = serving_inventory(lab_inventory)
    # the lab's guests have a fleet_address (the shared network) that the old tree does not know (it refuses unknown
    # vars); without a gateway group it changes nothing, so both trees converge the fleet file without it
    lab_inventory = _without_fleet_addresses(lab_inventory, lab_inventory.with_name("upgrade.yml"))
    old = _converge_with(base_tree, lab_inventory)
    assert "specfleet/host/layout.py" not in old.stdout  # the old tree knows nothing of the layout module
    before = started_at(vm_fleet)
    assert all(before.values()), before
    run = lab.run_pyinfra(lab_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]
    assert started_at(vm_fleet) == before, "the upgrade restarted a container"
    changed = {h: [op for op in ops if not any(w in op for w in HOST_TOOL_WRITES)] for h, ops in run.changed.items()}
    assert changed == {h: [] for h in run.changed}, f"the upgrade changed more than the host tools: {changed}"
    assert run.changed, "the upgrade rewrites the host tools (they changed): the check above saw them"
    again = lab.run_pyinfra(lab_inventory, "eagle3")
    assert again.returncode == 0 and again.changed == {}, again.changed
    for guest in vm_fleet.guests:  # and each host still serves its release
        assert lab.guest_curl_completion(guest)["choices"][0]["text"].strip(), guest.name
    figure("upgrade from before issue 17: operations that changed something / containers restarted",
           f"{sum(len(v) for v in run.changed.values())} (host tools + run lock) / 0")
