"""The container driver's machine-side parts, on the real kernel where they act on it: address slots, bridge names and
their cleanup, the cgroup kill, and the checks on which the lab falls back to QEMU (with stand-in tools on PATH)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from specfleet_lab.container import cgroups, engine, flags, slots

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="acts on the machine's links and cgroups (root)")


@pytest.fixture
def slot_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(slots, "SLOTS", tmp_path / "slots")
    return tmp_path


def test_two_engines_get_two_slots_and_a_gone_engines_slot_is_free_again(slot_dir):
    a, b, c = (slot_dir / n for n in "abc")
    a.mkdir(), b.mkdir(), c.mkdir()
    assert (slots.take(a), slots.take(b)) == (0, 1)
    assert slots.take(a) == 0  # its own again
    a.rmdir()  # its engine stopped (or was swept) without releasing
    assert slots.take(c) == 0
    slots.release(b)
    assert slots.held_by(b) == [] and slots.held_by(c) == ["0"]
    assert slots.pool(1) == "10.213.16.0/20"


def test_bridge_names_fit_the_kernel_and_name_their_slot():
    names = {engine.bridge_name(slot, f"lab-2-{n}-enp1s0f1np1") for slot in range(16) for n in range(50)}
    assert len(names) == 16 * 50
    assert max(map(len, names)) <= 15  # IFNAMSIZ - 1
    assert engine.bridge_name(10, "lab-0-mgmt").startswith("sfla-")


@as_root
def test_a_dead_engines_bridges_are_found_by_slot_and_deleted():
    slot = 15
    if slots.SLOTS.is_dir() and (slots.SLOTS / str(slot)).exists():
        pytest.skip("slot 15 is held by a running lab engine")
    name = engine.bridge_name(slot, f"test-{uuid.uuid4()}")
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True)
    try:
        assert name in engine.bridges(slot)
        assert engine.drop_bridges(slot) == []
        assert not Path("/sys/class/net", name).exists()
    finally:
        subprocess.run(["ip", "link", "delete", name], capture_output=True)


@as_root
@pytest.mark.skipif(not Path("/sys/fs/cgroup/pids").is_dir(), reason="cgroup v1 pids hierarchy")
def test_what_runs_in_a_runs_cgroups_is_killed_and_the_cgroups_removed():
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    group = Path("/sys/fs/cgroup/pids") / cgroups.parent(run_id).lstrip("/") / "host"
    group.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        (group / "cgroup.procs").write_text(str(proc.pid))
        assert cgroups.leftovers(run_id)
        assert cgroups.remove(run_id) == []
        assert proc.wait(timeout=10) == -9
        assert cgroups.leftovers(run_id) == []
    finally:
        proc.kill()
        cgroups.remove(run_id)


def test_hosts_of_another_architecture_go_to_qemu():
    why = flags.why_not(["x86_64", "aarch64"], "x86_64")
    assert why == "aarch64 hosts on this x86_64 machine need their own kernel (QEMU)"


def test_a_forward_policy_of_drop_is_a_reason(tmp_path, monkeypatch):
    fake = tmp_path / "iptables"
    fake.write_text("#!/bin/sh\necho '-P FORWARD DROP'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert "FORWARD policy is DROP" in flags._forward_policy()
    fake.write_text("#!/bin/sh\necho '-P FORWARD ACCEPT'\n")
    assert flags._forward_policy() is None


def test_another_engine_that_manages_iptables_is_a_reason(tmp_path):
    if flags._other_engine():
        pytest.skip("another docker engine runs on this machine")
    other = subprocess.Popen(["bash", "-c", f"exec -a {tmp_path}/dockerd sleep 300"])
    try:
        for _ in range(50):  # until exec has replaced bash's command line
            if Path(f"/proc/{other.pid}/cmdline").read_bytes().startswith(f"{tmp_path}/dockerd".encode()):
                break
            subprocess.run(["sleep", "0.1"])
        why = flags._other_engine()
        assert why and f"pid {other.pid}" in why, why
    finally:
        other.kill()
        other.wait()
