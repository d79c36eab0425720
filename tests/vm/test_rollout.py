"""Rollouts and rollback on the VM fleet (3 guests, the trtllm-serve stand-in). Runs after the CI
sequence in the same session and fleet; tests run in file order and share STATE."""

from __future__ import annotations

import threading
import time

import pytest

from tests.vm import lab
from tests.vm.conftest import figure
from tests.vm.test_ci_sequence import api_bytes, file_bytes, started_at

pytestmark = pytest.mark.vm

EAGLE = "nvidia/gpt-oss-120b-Eagle3-long-context"
BAD_TAG = f"{lab.STANDIN_REPO}:1.2.0rc7-bad"
STATE: dict = {}


def serving_inventory(lab_inventory):
    """The inventory of the release the fleet serves now: the lab's, or in --full the one the rollout tests left (C).
    Later modules converge this one, so that a converge is a no-op, not a fleet-wide switch."""
    return STATE.get("serving_inventory", lab_inventory)


def current(fleet) -> dict[str, str]:
    return {g.name: g.ssh("basename $(readlink /var/lib/specfleet/current)").stdout.strip() for g in fleet.guests}


def config_of(guest, rid: str) -> str:
    return guest.ssh(f"cat /var/lib/specfleet/releases/{rid}/extra-llm-api-config.yml").stdout


def test_baseline_release_serving(vm_fleet, lab_inventory, hub):
    run = lab.run_pyinfra(lab_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-3000:]
    STATE["A"] = current(vm_fleet)
    assert len(set(STATE["A"].values())) == 1
    STATE["A_config"] = {g.name: config_of(g, STATE["A"][g.name]) for g in vm_fleet.guests}


def test_good_rollout_keeps_the_fleet_available(vm_fleet, lab_inventory, hub):
    """New release: the older EAGLE-3 head commit + max_draft_len 3. Batches 1,1 => largest batch 1, so
    at every second at least N - 1 hosts must answer /v1/completions."""
    from tests.vm.hub_standin import HubStandin
    old_head = HubStandin.commits(EAGLE)[0]
    inv_b = lab.with_vars(lab_inventory, vm_fleet.workdir / "release-b.yml", draft_revision=old_head,
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 3}})
    STATE["inv_b"] = inv_b
    lab.start_pollers(vm_fleet)
    time.sleep(3)
    start = time.time()
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_b)
    end = time.time()
    polls = lab.stop_pollers(vm_fleet)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result: SUCCESS" in proc.stdout
    after = current(vm_fleet)
    assert all(after[h] != STATE["A"][h] for h in after) and len(set(after.values())) == 1
    STATE["B"] = after
    counts = lab.availability_per_second(polls, start + 1, end - 1)
    n = len(vm_fleet.guests)
    assert counts and min(counts) >= n - 1, f"availability per second during the rollout: {counts}"
    # figures: switch downtime per host minus the stand-in's load delay, total vs sum of gates
    downtimes = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in after and parts[-1] == "switched":
            downtimes[parts[0]] = float(parts[-2].rstrip("s"))
    assert set(downtimes) == set(after), proc.stdout
    load_delay = 4.0
    figure("rollout: per-host switch downtime - stand-in load delay",
           ", ".join(f"{h} {d - load_delay:.1f}s" for h, d in downtimes.items()))
    figure("rollout: total time / sum of switch gates", f"{end - start:.1f}s / {sum(downtimes.values()):.1f}s")
    figure("rollout: min hosts answering at any second (N=3, largest batch 1)", str(min(counts)))
    staged = [line.split("stage done in ", 1)[1] for line in (proc.stdout + proc.stderr).splitlines() if "stage done in " in line]
    figure(f"rollout: stage of N={n} hosts at once (gevent-patched entry)", staged[0] if staged else "not logged")


def test_rollback_restores_the_previous_release_byte_for_byte(vm_fleet, lab_inventory, hub):
    hub.reset_log()
    run = lab.run_pyinfra(lab_inventory, "rollback")
    assert run.returncode == 0, run.output()[-3000:]
    assert current(vm_fleet) == STATE["A"]
    for g in vm_fleet.guests:
        assert config_of(g, STATE["A"][g.name]) == STATE["A_config"][g.name]
        assert g.ssh("cat /var/lib/specfleet/current/extra-llm-api-config.yml").stdout == STATE["A_config"][g.name]
        answer = lab.guest_curl_completion(g)
        assert answer["choices"][0]["text"].strip()
    assert file_bytes(hub) == 0 and api_bytes(hub) == 0, hub.bytes_served()
    figure("rollback: bytes served by the Hub stand-in", str(hub.total_bytes()))
    listing = lab.run_specfleet("releases", "inventory.py", inventory=lab_inventory)
    assert listing.returncode == 0
    for g in vm_fleet.guests:
        assert f"* {STATE['A'][g.name]}" in listing.stdout and STATE["B"][g.name] in listing.stdout


@pytest.mark.full  # CI keeps the unit test of the same halt: tests/unit/test_rollout_halt.py
def test_bad_release_is_rolled_back_on_the_canary_and_halts(vm_fleet, lab_inventory):
    lab.make_variant_in_guests(vm_fleet, "crash", BAD_TAG)
    inv_bad = lab.with_vars(lab_inventory, vm_fleet.workdir / "release-bad.yml", image=BAD_TAG)
    before, started = current(vm_fleet), started_at(vm_fleet)
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_bad)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    canary, *others = [g.name for g in vm_fleet.guests]
    assert "result: HALTED" in proc.stdout
    assert any(line.startswith(canary) and "rolled back" in line for line in proc.stdout.splitlines()), proc.stdout
    assert current(vm_fleet) == before, "every host serves its old release"
    now = started_at(vm_fleet)
    for h in others:
        assert now[h] == started[h], f"{h} was restarted although the rollout halted at the canary"
        assert any(line.startswith(h) and "not touched" in line for line in proc.stdout.splitlines())
    assert lab.guest_curl_completion(vm_fleet.guests[0])["choices"][0]["text"].strip()


@pytest.mark.full  # two reboots' worth of minutes: the --full tier
def test_guest_powered_off_mid_rollout_halts_and_rerun_completes(vm_fleet, lab_inventory):
    inv_c = lab.with_vars(lab_inventory, vm_fleet.workdir / "release-c.yml",
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 2}})
    canary, victim, last = vm_fleet.guests
    before = current(vm_fleet)
    powered_off = threading.Event()

    def power_off_after_canary_switch():
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            out = canary.ssh("basename $(readlink /var/lib/specfleet/current)", check=False).stdout.strip()
            if out and out != before[canary.name]:
                victim.poweroff()
                powered_off.set()
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=power_off_after_canary_switch, daemon=True)
    watcher.start()
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_c)
    watcher.join(timeout=60)
    assert powered_off.is_set()
    assert proc.returncode == 1 and "result: HALTED" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith(victim.name) and "unreachable" in line for line in lines), proc.stdout
    assert any(line.startswith(last.name) and "not touched" in line for line in lines), proc.stdout
    now = {g.name: g.ssh("basename $(readlink /var/lib/specfleet/current)").stdout.strip() for g in (canary, last)}
    assert now[canary.name] != before[canary.name] and now[last.name] == before[last.name]
    for g in (canary, last):  # nobody half-switched: both serve
        assert g.ssh("systemctl is-active specfleet-trtllm").stdout.strip() == "active"
        assert lab.guest_curl_completion(g)["choices"][0]["text"].strip()
    victim.boot(wait=True)
    # the canary is already current: the two others switch as one batch (one gate's wait, not two in a row)
    rerun = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,2", inventory=inv_c)
    assert rerun.returncode == 0 and "result: SUCCESS" in rerun.stdout, rerun.stdout + rerun.stderr[-2000:]
    final = current(vm_fleet)
    assert len(set(final.values())) == 1 and final[canary.name] == now[canary.name]
    STATE["serving_inventory"] = inv_c


@pytest.mark.full  # the lock refusal itself stays in CI: test_faults.py::test_two_converges_at_once
def test_two_rollouts_at_once_the_second_is_refused(vm_fleet, lab_inventory):
    # the release the fleet serves now: the lab's (A, after the halted bad rollout) or, in the --full tier, C
    inv_c = serving_inventory(lab_inventory)
    first = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", inventory=inv_c, background=True)
    guest = vm_fleet.guests[0]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and guest.ssh("test -e /var/lib/specfleet/lock/owner", check=False).returncode:
        time.sleep(0.3)
    second = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", inventory=inv_c)
    out, err = first.communicate(timeout=1800)
    assert second.returncode == 4, second.stdout + second.stderr
    assert "refused: another rollout holds the lock: rollout" in second.stderr
    assert first.returncode == 0, out + err[-2000:]
    assert guest.ssh("test -e /var/lib/specfleet/lock", check=False).returncode != 0, "lock released"
