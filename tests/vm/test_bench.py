"""`specfleet bench` on the VM fleet: 3 variants on 3 guests (one round), a few requests each, against the
trtllm-serve STAND-IN (its SYNTHETIC speculative-decoding model, default parameters); then every guest serves
the release it served before, and `specfleet status` says the fleet is healthy.

Must run AFTER the CI sequence and rollout modules (it converges eagle3 first if needed, which would spoil their
"first converge" figures): tests/vm/conftest.py orders test_bench.py last."""

from __future__ import annotations

import json

import pytest

from tests.vm import lab
from tests.vm.test_rollout import serving_inventory

pytestmark = [pytest.mark.vm, pytest.mark.full]  # minutes of switching on 3 guests: the --full tier


def current(fleet) -> dict[str, str]:
    return {g.name: g.ssh("basename $(readlink /var/lib/specfleet/current)").stdout.strip() for g in fleet.guests}


def test_bench_three_variants_on_three_guests(vm_fleet, lab_inventory, hub, tmp_path):
    # a serving fleet: what it serves now (in --full, the release the rollout tests left: a no-op converge, not a
    # fleet-wide switch); the variants come from the lab's vars, and each host returns to what it served before
    serving = serving_inventory(lab_inventory)
    run = lab.run_pyinfra(serving, "eagle3")
    assert run.returncode == 0, run.output()[-3000:]
    before = current(vm_fleet)
    assert all(before.values()), before
    out = tmp_path / "bench-out"
    proc = lab.run_specfleet("bench", "inventory.py", "--variants", "baseline eagle3:max_draft_len=1,3",
                             "--limit", "vm_fleet", "--requests", "2", "--buckets", "short,medium",
                             "--max-tokens", "48", "--out", str(out), inventory=lab_inventory, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the table: variant x bucket, with tokens/s, speed-up and acceptance
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:8] == ["variant", "engine", "host", "bucket", "tokens/s", "speedup", "acc.len", "acc.rate"]
    for variant in ("baseline", "eagle3:max_draft_len=1", "eagle3:max_draft_len=3"):
        assert sum(line.startswith(variant + " ") for line in lines) == 2, proc.stdout  # 2 buckets each
    assert "STAND-IN" in proc.stdout and "SYNTHETIC" in proc.stdout
    # the JSON: every raw figure and the environment
    doc = json.loads((out / "bench.json").read_text())
    assert doc["standin"] is True and len(doc["results"]) == 3
    by = {r["variant"]: r for r in doc["results"]}
    assert {r["host"] for r in doc["results"]} == {g.name for g in vm_fleet.guests}
    for r in doc["results"]:
        assert not r["error"] and r["env"]["arch"] and "standin" in r["image"] and r["models"]["target"]["commit"]
        assert set(r["buckets"]) == {"short", "medium"} and r["raw"]["buckets"]["short"]["requests"]
        for f in r["buckets"].values():
            assert f["requests"] == 2 and f["output_tokens"] == 2 * 48 and f["tokens_per_s"] > 0
    assert by["baseline"]["buckets"]["short"]["speedup"] == pytest.approx(1.0)
    # stand-in defaults (Eagle, p = 0.8, 0.7, 0.6): acceptance length 1.8 (k=1) and 2.696 (k=3), speed-ups ~1.65
    # and ~2.1 at 17 ms per target step; loose bounds: the guests run under TCG
    k1, k3 = by["eagle3:max_draft_len=1"]["buckets"]["medium"], by["eagle3:max_draft_len=3"]["buckets"]["medium"]
    assert 1.4 <= k1["acceptance_length"] <= 2.0 and 2.2 <= k3["acceptance_length"] <= 3.2, (k1, k3)
    assert k3["speedup"] > 1.2 and k1["speedup"] > 1.0, (k1["speedup"], k3["speedup"])
    # the PNG
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every guest is back on its release, and the fleet is healthy
    assert current(vm_fleet) == before
    for g in vm_fleet.guests:
        assert g.ssh("test -e /var/lib/specfleet/lock", check=False).returncode != 0, "bench lock released"
    st = lab.run_specfleet("status", "inventory.py", inventory=serving)
    assert st.returncode == 0, st.stdout + st.stderr
    assert all(any(line.startswith(g.name) and " ok " in line for line in st.stdout.splitlines()) for g in vm_fleet.guests)
    st = lab.run_specfleet("status", "inventory.py", "--json", inventory=serving)
    assert {r["release"] for r in json.loads(st.stdout)} == set(before.values())
