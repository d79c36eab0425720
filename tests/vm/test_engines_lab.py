"""Both engines on the session fleet: the trtllm-serve STAND-IN and the vLLM STAND-IN image (lab.VLLM_STANDIN_TAG,
derived in the guests from the trtllm-serve stand-in; `vllm_image` names it). Every figure here is a stand-in's
(synthetic tokens, synthetic acceptance), not vLLM's or TensorRT-LLM's on a GPU.

- the bench table across both engines (no gateway);
- a bad `vllm_options` refused by the deploy before anything changes;
- behind one gateway: one model, `openai/gpt-oss-120b`, served by TensorRT-LLM and vLLM Sparks side by side, no
  client credential reaching the vLLM Spark through the API or the metrics relay, and a rollout of the fleet from
  TensorRT-LLM to vLLM under a client's load (0 failed requests).

Each test brings the fleet to the state it starts from itself (a `-k` run of one test works); in file order each
such step is a no-op or one host's switch. Runs after test_bench.py (tests/vm/conftest.py orders it); it leaves the
Sparks serving vllm_eagle3, their gateway side installed and the gateway host gone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

import specfleet_lab
from specfleet.constants import EXIT_INVALID
from specfleet.engines.catalog import TRTLLM, VLLM
from specfleet.overview.host.overview import counter_sums
from tests.unit.test_gateway_files import CREDENTIALS
from tests.vm import gateway_lab, lab
from tests.vm.conftest import cache_dir, figure
from tests.vm.standin_common.standin_credentials import CREDENTIALS_SEEN
from tests.vm.test_ci_sequence import started_at

pytestmark = [pytest.mark.vm, pytest.mark.full]  # minutes of switching on the session fleet: the --full tier

MODEL = "openai/gpt-oss-120b"
DATA = "/var/lib/specfleet"
TRT_UNIT, VLLM_UNIT = TRTLLM.unit, VLLM.unit  # each engine's serving unit and container (service_name unset)
GENERATED = "vllm:generation_tokens_total"  # the vLLM stand-in's own count of the tokens it served
COMPLETION_LINE = '"POST /v1/completions HTTP/1.1" 200'  # the trtllm-serve stand-in's line per answered completion


def current(fleet) -> dict[str, str]:
    return {g.name: g.ssh(f"basename $(readlink {DATA}/current)").stdout.strip() for g in fleet.guests}


def release(guest) -> dict:
    return json.loads(lab.guest_release_json(guest))


def release_files(fleet) -> dict[str, str]:
    """Each host's current release: its id and the sha256 of every file in its directory (what a refused deploy must
    leave as it was)."""
    return {g.name: g.ssh(f"cd {DATA}/current/ && readlink -f . && find . -type f | sort | xargs sha256sum").stdout
            for g in fleet.guests}


def generated_tokens(guest) -> float:
    """The vLLM stand-in's generation_tokens_total, read on the host's loopback (reading consumes nothing)."""
    text = guest.ssh("curl -fsS -m 10 http://127.0.0.1:8000/metrics").stdout
    return counter_sums(text, [GENERATED])[GENERATED]


def completions_logged(guest) -> int:
    """Completions the trtllm-serve stand-in on `guest` has answered (its journal: one line per request)."""
    out = guest.ssh(f"journalctl -q --no-pager -o cat -u {TRT_UNIT}").stdout
    return sum(COMPLETION_LINE in line for line in out.splitlines())


@pytest.fixture(scope="module")
def vllm_standin(vm_fleet, lab_inventory) -> str:
    """The vLLM STAND-IN image in every guest (lab_inventory loaded the trtllm-serve stand-in it derives from)."""
    seconds = lab.make_vllm_standin_in_guests(vm_fleet)
    figure("engines: derive the vLLM STAND-IN image in each guest (docker create/cp/commit)",
           ", ".join(f"{h} {s:.1f} s" for h, s in sorted(seconds.items())))
    return lab.VLLM_STANDIN_TAG


@pytest.fixture(scope="module")
def plain_inventory(vm_fleet, lab_inventory, vllm_standin) -> Path:
    """The lab's inventory with `vllm_image` the vLLM stand-in and the guests' memory share (lab.VLLM_LAB_SHARE),
    locked: a test's vars, like with_vars' others, not among the lab's ci_vars, since only the vLLM profiles read
    them."""
    return lab.with_vars(lab_inventory, vm_fleet.workdir / "engines.yml", vllm_image=vllm_standin,
                         vllm_gpu_memory_utilization=lab.VLLM_LAB_SHARE)


def _serving(inventory: Path, deploy: str, *extra: str) -> None:
    run = lab.run_pyinfra(inventory, deploy, *extra)
    assert run.returncode == 0, run.output()[-3000:]


# ---- c. the bench table across both engines --------------------------------------------------------------------
def test_bench_table_across_both_engines(vm_fleet, plain_inventory, tmp_path):
    _serving(plain_inventory, "eagle3")  # a serving fleet to return to
    before = current(vm_fleet)
    out = tmp_path / "bench-out"
    variants = "eagle3 vllm_eagle3:num_speculative_tokens=3,5 baseline vllm_baseline"
    start = time.monotonic()
    proc = lab.run_specfleet("bench", "inventory.py", "--variants", variants, "--limit", "vm_fleet", "--requests", "2",
                             "--buckets", "short", "--max-tokens", "48", "--out", str(out), inventory=plain_inventory,
                             timeout=2400)
    figure("engines: bench of 5 variants across both engines on 3 guests", f"{time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    print("\nSTAND-IN bench table across engines (synthetic, not vLLM or TensorRT-LLM on a GPU):\n" + proc.stdout)
    names = ("eagle3", "vllm_eagle3:num_speculative_tokens=3", "vllm_eagle3:num_speculative_tokens=5", "baseline",
             "vllm_baseline")
    lines = proc.stdout.splitlines()
    for variant in names:
        assert sum(line.startswith(variant + " ") for line in lines) == 1, (variant, proc.stdout)
    doc = json.loads((out / "bench.json").read_text())
    by = {r["variant"]: r for r in doc["results"]}
    assert doc["standin"] is True and set(by) == set(names), sorted(by)
    for name, r in by.items():
        assert not r["error"], (name, r["error"])
        spec = r["buckets"]["short"]["spec"]
        assert spec["source"] == ("counters" if name.startswith("vllm_") else "iteration stats"), (name, spec)
        assert r["buckets"]["short"]["tokens_per_s"] > 0
    assert "vllm" in by["vllm_eagle3:num_speculative_tokens=3"]["image"], by["vllm_eagle3:num_speculative_tokens=3"]
    # the vLLM stand-in's default eagle3 acceptance (0.8, 0.7, 0.6, 0.5, 0.45): length 1 + sum of the prefix
    # products, 2.70 (k=3) and 3.05 (k=5); loose bounds, a few requests of 48 tokens
    k3, k5 = (by[f"vllm_eagle3:num_speculative_tokens={k}"]["buckets"]["short"] for k in (3, 5))
    assert 2.0 <= k3["acceptance_length"] <= 3.5 and 2.0 <= k5["acceptance_length"] <= 4.5, (k3, k5)
    assert by["eagle3"]["buckets"]["short"]["acceptance_length"] > 1.0
    assert by["vllm_baseline"]["buckets"]["short"]["acceptance_length"] is None  # no drafts counted
    assert current(vm_fleet) == before, "bench: a host did not return to its release"


# ---- d. a bad vllm_options refused before anything changes -------------------------------------------------------
def test_bad_vllm_options_refused_before_anything_changes(vm_fleet, plain_inventory):
    _serving(plain_inventory, "vllm_eagle3")
    before, files, started = current(vm_fleet), release_files(vm_fleet), started_at(vm_fleet)
    assert all(release(g)["engine"] == "vllm" for g in vm_fleet.guests)
    bad = lab.with_vars(plain_inventory, vm_fleet.workdir / "engines-bad.yml", lock=False,
                        vllm_options={"speculative_config": {"method": "eagle4"}})
    problem = ("vllm_options.speculative_config.method: 'eagle4' is not accepted (allowed: ngram, ngram_gpu, medusa, "
               "mlp_speculator, draft_model, suffix, eagle, eagle3, dflash, mtp, extract_hidden_states)")
    group = "vm_fleet (" + ", ".join(g.name for g in vm_fleet.guests) + ")"
    lock_before = Path(f"{bad}.lock").read_text()
    locked = lab.run_specfleet("lock", "inventory.py", inventory=bad)
    # `specfleet lock` refuses it too, with one line for the group, and writes nothing
    assert locked.returncode == EXIT_INVALID and f"{group}: {problem}" in locked.stderr, locked.stderr[-3000:]
    assert Path(f"{bad}.lock").read_text() == lock_before
    run = lab.run_pyinfra(bad, "vllm_eagle3")
    # refused while pyinfra loads the inventory (pyinfra_groups), before it connects: EXIT_INVALID and one
    # `GROUP (HOSTS): KEY: ...` line for the problem the group's hosts share
    assert run.returncode == EXIT_INVALID, run.output()[-3000:]
    assert "Connecting to hosts" not in run.output(), run.output()[-3000:]
    refused = [line for line in run.output().splitlines() if "vllm_options" in line]
    assert refused == [f"specfleet: {group}: {problem}"], run.output()[-3000:]
    assert not run.changed, run.changed
    # what the hosts serve afterwards: the same release, the same files, the same container
    assert current(vm_fleet) == before and release_files(vm_fleet) == files and started_at(vm_fleet) == started
    for g in vm_fleet.guests:
        assert lab.guest_curl_completion(g)["choices"][0]["text"].strip()


# ---- a and b: behind one gateway ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gateway(request, vm_fleet, lab_inventory, vllm_standin):
    """A gateway host on the session network (torn down with the module) and two fleet files behind it: `mixed` (the
    second Spark serves vllm_eagle3, the others eagle3) and `vllm` (every Spark serves vllm_eagle3)."""
    workdir = vm_fleet.workdir / "engines-gateway"
    try:
        fleet = gateway_lab.boot(vm_fleet, workdir, cache_dir())
        base = lab.with_vars(lab_inventory, vm_fleet.workdir / "engines-base.yml", vllm_image=vllm_standin,
                             vllm_gpu_memory_utilization=lab.VLLM_LAB_SHARE)
        mixed = gateway_lab.inventory(base, fleet, vm_fleet.workdir / "engines-mixed.yml",
                                      vm_fleet.workdir / "engines-api-keys", serves="eagle3")
        inv = yaml.safe_load(mixed.read_text())
        inv["all"]["children"]["vm_fleet"]["hosts"][vm_fleet.guests[1].name]["serves"] = "vllm_eagle3"
        mixed.write_text(yaml.safe_dump(inv, sort_keys=False))
        lab.write_lock(mixed)
        inv["all"]["children"]["vm_fleet"]["hosts"][vm_fleet.guests[1].name].pop("serves")
        inv["all"]["children"]["vm_fleet"]["vars"]["serves"] = "vllm_eagle3"
        vllm = vm_fleet.workdir / "engines-vllm.yml"
        vllm.write_text(yaml.safe_dump(inv, sort_keys=False))
        Path(f"{vllm}.lock").write_text(Path(f"{mixed}.lock").read_text())
        lab.write_lock(vllm)
        run = lab.run_pyinfra(mixed, "gateway")
        assert run.returncode == 0, run.output()[-3000:]
        yield {"guest": fleet.guests[0], "mixed": mixed, "vllm": vllm, "url": "http://127.0.0.1:8000"}
    finally:
        specfleet_lab.down(workdir)


def _wait_pool_up(gw, fleet, seconds: float = 120) -> None:
    lab.wait_for("every Spark UP in the gateway's pool",
                 lambda: all(s.startswith("UP") for s in (gateway_lab.pool(gw["guest"]).get(g.name, "")
                                                          for g in fleet.guests)), timeout=seconds, every=1)


def _mixed_fleet(vm_fleet, gw) -> None:
    """The second Spark on vllm_eagle3, the others on eagle3, behind the gateway: one host per converge (--limit), so
    that the gateway always has a ready host of the model."""
    for deploy, host in (("vllm_eagle3", vm_fleet.guests[1]), ("eagle3", vm_fleet.guests[0]),
                         ("eagle3", vm_fleet.guests[2])):
        _serving(gw["mixed"], deploy, "--limit", host.name)
    _wait_pool_up(gw, vm_fleet)


def _gateway_get(gw, path: str) -> dict:
    out = gw["guest"].ssh(f"curl -fsS -m 30 -H @- {gw['url']}{path}",
                          input=f"Authorization: Bearer {gateway_lab.KEY}\n".encode()).stdout
    return json.loads(out)


def test_trtllm_and_vllm_sparks_serve_one_model_behind_one_gateway(vm_fleet, gateway):
    _mixed_fleet(vm_fleet, gateway)
    engines = {g.name: release(g)["engine"] for g in vm_fleet.guests}
    trt, vl = vm_fleet.guests[0], vm_fleet.guests[1]
    assert engines == {vm_fleet.guests[0].name: "trtllm", vl.name: "vllm", vm_fleet.guests[2].name: "trtllm"}, engines
    assert vl.ssh(f"docker inspect --format '{{{{.Config.Image}}}} {{{{.Path}}}}' {VLLM_UNIT}").stdout.split() == \
        [lab.VLLM_STANDIN_TAG, "vllm"]
    models = _gateway_get(gateway, "/v1/models")
    assert [m["id"] for m in models["data"]] == [MODEL], models
    trts = (vm_fleet.guests[0], vm_fleet.guests[2])
    logged_before, tokens_before = {g.name: completions_logged(g) for g in trts}, generated_tokens(vl)
    start = time.monotonic()
    load = gateway_lab.run_load(gateway["guest"], gateway["url"], gateway_lab.KEY, concurrency=3, count=36,
                                seconds=300, pause=0.2, stream_every=2, max_tokens=24)
    s = load.summary
    figure("engines: completions through the gateway to 2 trtllm + 1 vLLM stand-ins: requests / failed / p50",
           f"{s['requests']} / {s['failed']} / {s['p50_s']:.3f} s in {time.monotonic() - start:.1f} s")
    assert s["requests"] == 36 and s["failed"] == 0, load.failures()[:5]
    # what each stand-in counted itself: trtllm-serve's journal lines, vLLM's generation_tokens_total (24 per request)
    served_trt = {g.name: completions_logged(g) - logged_before[g.name] for g in trts}
    served_vllm = (generated_tokens(vl) - tokens_before) / 24
    figure("engines: requests each backend served through the gateway (by the stand-ins' own counts)",
           ", ".join(f"{h} {n}" for h, n in served_trt.items()) + f", {vl.name} {served_vllm:g} (vLLM)")
    assert served_vllm > 0, "the vLLM Spark served none of the gateway's requests"
    assert sum(served_trt.values()) > 0, "no TensorRT-LLM Spark served the gateway's requests"
    assert sum(served_trt.values()) + served_vllm == 36, (served_trt, served_vllm)
    # status: the vLLM host's acceptance length, read from its counters (release.json `counters`)
    assert release(vl)["counters"]["format"] == "prometheus"
    st = lab.run_specfleet("status", "inventory.py", "--json", inventory=gateway["mixed"])
    assert st.returncode == 0, st.stdout + st.stderr
    rows = {r["host"]: r for r in json.loads(st.stdout) if "host" in r}
    m = rows[vl.name]["metrics"] or {}
    assert m.get("source") == "the server's counters since it started" and m["acceptance_length"] > 1.0, m
    table = lab.run_specfleet("status", "inventory.py", inventory=gateway["mixed"])
    row = next(line for line in table.stdout.splitlines() if line.startswith(vl.name + " "))
    assert f"{m['acceptance_length']:.2f}" in row.split(), row
    assert trt.ssh(f"systemctl is-active {TRT_UNIT}").stdout.strip() == "active"


def test_no_client_credential_reaches_the_vllm_spark_through_either_port(vm_fleet, gateway):
    """Completions through the API port and the vLLM Spark's engine metrics through the metrics port's relay (GET
    /sparks/<spark>/metrics), each with every credential header a client may send: the vLLM stand-in logs the name
    of each credential-like header it receives (never its value) and logs none of them, while one sent to it
    directly is logged."""
    _mixed_fleet(vm_fleet, gateway)
    vl, gw = vm_fleet.guests[1], gateway["guest"]
    since = vl.ssh("date -u '+%Y-%m-%d %H:%M:%S'").stdout.strip()
    # on stdin (curl -H @-): on no command line
    headers = "".join(f"{k}: {v}\n" for k, v in {**CREDENTIALS, "Authorization": f"Bearer {gateway_lab.KEY}"}.items())
    tokens_before = generated_tokens(vl)
    body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 4})
    for path in ("/v1/completions", f"/models/{MODEL}/v1/completions") * 3:  # leastconn: each Spark gets some
        out = gw.ssh(f"curl -fsS -m 30 -H @- -H 'Content-Type: application/json' -d '{body}' {gateway['url']}{path}",
                     input=headers.encode()).stdout
        assert json.loads(out)["choices"][0]["text"].strip(), out
    relayed = gw.ssh(f"curl -fsS -m 30 -H @- http://127.0.0.1:8404/sparks/{vl.name}/metrics",
                     input=headers.encode()).stdout
    assert GENERATED in relayed, relayed[:300]
    assert generated_tokens(vl) > tokens_before, "the vLLM Spark served none of the completions"
    vl.ssh("curl -fsS -m 10 -o /dev/null -H 'x-api-key: not-a-key' http://127.0.0.1:8000/health")
    direct = f"{CREDENTIALS_SEEN}: x-api-key (values not logged) on GET /health"

    def seen() -> list[str]:
        out = vl.ssh(f"journalctl -q --no-pager -o cat -u {VLLM_UNIT} --since '{since}'").stdout
        return [line.split("] ", 1)[-1] for line in out.splitlines() if CREDENTIALS_SEEN in line]

    lab.wait_for("the vLLM stand-in logged the header sent to it directly", lambda: direct in seen(), timeout=60,
                 every=1)
    figure("engines: credential headers at the vLLM Spark from 6 completions and 1 metrics relay with "
           f"{len(CREDENTIALS)} each", "none")
    assert seen() == [direct], seen()  # the journal is in order: what the gateway sent came before


def test_rollout_from_trtllm_to_vllm_behind_the_gateway_loses_no_request(vm_fleet, gateway):
    _mixed_fleet(vm_fleet, gateway)
    before = current(vm_fleet)
    load = gateway_lab.start_load(gateway["guest"], gateway["url"], gateway_lab.KEY, concurrency=2, count=4000,
                                  seconds=1500, pause=1.0, stream_every=2, max_tokens=24)
    time.sleep(3)
    start = time.monotonic()
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/vllm_eagle3.py", "--batches", "1,1",
                             inventory=gateway["vllm"])
    seconds = time.monotonic() - start
    time.sleep(3)
    load.stop()
    s = load.summary
    figure("engines: rollout eagle3 -> vllm_eagle3 behind the gateway: seconds / requests / failed / p99",
           f"{seconds:.1f} s / {s['requests']} / {s['failed']} / {s['p99_s']:.3f} s")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert s["requests"] >= 20 and s["failed"] == 0, load.failures()[:5]
    after = current(vm_fleet)
    for g in vm_fleet.guests:
        rec = release(g)
        assert rec["profile"] == "vllm_eagle3" and rec["engine"] == "vllm", rec
        assert g.ssh(f"docker inspect --format '{{{{.Config.Image}}}}' {VLLM_UNIT}").stdout.strip() == \
            lab.VLLM_STANDIN_TAG
        # the switch stopped and disabled TensorRT-LLM's unit: one server holds the port
        assert g.ssh(f"systemctl is-active {TRT_UNIT}; systemctl is-enabled {TRT_UNIT}", check=False).stdout.split() \
            == ["inactive", "disabled"], g.name
        assert lab.guest_curl_completion(g)["choices"][0]["text"].strip()
    switched = [h for h in after if after[h] != before[h]]
    assert switched == [vm_fleet.guests[0].name, vm_fleet.guests[2].name], (before, after)
    assert after[vm_fleet.guests[1].name] == before[vm_fleet.guests[1].name]
    _wait_pool_up(gateway, vm_fleet)
    assert [m["id"] for m in _gateway_get(gateway, "/v1/models")["data"]] == [MODEL]
