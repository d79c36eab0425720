"""What specfleet renders for hosts, pinned byte for byte: a refactor changes no host, and a rendering change shows.

For the example fleets x every profile x each supported TensorRT-LLM image, and a fleet behind a gateway: every
rendered file (config, unit, smoke, the Hub mirror's units and config, the gateway's HAProxy files, the Sparks'
gateway-facing units) and every release id, compared with tests/unit/golden/rendered.json. A changed release id is
a rendering change: its host restarts on its next converge (bump render.RENDERING); a changed gateway file is a
reload of HAProxy. When it is intended, regenerate with
`SPECFLEET_GOLDEN_WRITE=1 python3 -m pytest tests/unit/test_golden_render.py` and say so in docs/upgrades.md's upgrade
notes.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest
import yaml

from specfleet.fleet.inventory import load_inventory
from specfleet.fleet.profiles import nodes, profiles
from specfleet.gateway.render import backends, gateway_files, gateway_options, spark_files
from specfleet.mirror.render import mirror_files
from specfleet.plan import PlanError, build_plans
from tests.unit.fakehost import write_fake_lock

GOLDEN = Path(__file__).parent / "golden" / "rendered.json"
EXAMPLE = Path(__file__).parents[2] / "specfleet" / "scaffold" / "inventory" / "example.yml"
# The single-Spark profiles, on both example fleets; a two-Spark profile on the PAIR fleet (its rules are
# tests/unit/test_pair_fleet.py's).
SINGLE = sorted(p for p in profiles() if nodes(p) == 1)
PAIRED = sorted(p for p in profiles() if nodes(p) == 2)
IMAGES = {"1.2.0rc6": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6",
          "1.3.0rc12": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"}
# A lab-like fleet: a Hub mirror, non-default paths, port, service name, container env and a tiktoken profile.
LAB = """\
all:
  vars: {ssh_user: spark, _sudo: true, operator_users: [spark], gpus: false}
  children:
    hub_mirror:
      hosts:
        mirror-01: {ansible_host: 10.1.0.5, hub_endpoint: "http://hub.lab:8999", mirror_allowed_networks: [10.1.0.0/24]}
    sparks:
      vars: {serve_port: 8011, service_name: trtllm-lab, data_dir: /srv/specfleet, container_env: {NCCL_DEBUG: WARN}}
      hosts:
        spark-01: {ansible_host: 10.1.0.11}
        spark-02: {ansible_host: 10.1.0.12, serve_host: 0.0.0.0, extra_llm_api_options: {max_batch_size: 4}}
"""
# A fleet with one pair: the head's unit runs the MPI launch, the worker's holds its container (pair/launch.py).
PAIR = """\
all:
  vars: {ssh_user: spark, _sudo: true, operator_users: [spark]}
  children:
    pair_a:
      vars: {serves: qwen3_eagle3_pair}
      hosts:
        spark-01: {ansible_host: 10.1.0.11, pair_role: head}
        spark-02: {ansible_host: 10.1.0.12, pair_role: worker}
"""

# A fleet behind a gateway: the gateway's HAProxy files (keys given here: the key map holds their digests only), and
# the Sparks' release ids and gateway-facing units.
GATEWAY = """\
all:
  vars: {ssh_user: spark, _sudo: true, operator_users: [spark]}
  hosts:
    spark-01: {ansible_host: 10.1.0.11, serves: eagle3}
    spark-02: {ansible_host: 10.1.0.12, serves: eagle3}
    spark-03: {ansible_host: 10.1.0.13, serves: draft_target}
  children:
    gateway:
      hosts:
        gw-1: {ansible_host: 10.1.0.2}
"""
# Both engines behind one gateway: one model over a TensorRT-LLM and a vLLM backend.
MIXED = GATEWAY.replace("spark-02: {ansible_host: 10.1.0.12, serves: eagle3}",
                        "spark-02: {ansible_host: 10.1.0.12, serves: vllm_eagle3}")
GATEWAY_KEYS = {"golden": "sk-specfleet-golden-0123456789"}
FLEETS = {"lab": LAB, "pair": PAIR, "gateway": GATEWAY, "mixed": MIXED}


def _fleet_file(tmp: Path, fleet: str, version: str) -> Path:
    """The fleet file with the version's image in all.vars, and the lock `specfleet lock` would write (fake pins)."""
    text = EXAMPLE.read_text() if fleet == "example" else FLEETS[fleet]
    doc = yaml.safe_load(text)
    doc["all"]["vars"]["image"] = IMAGES[version]
    path = tmp / f"{fleet}-{version}" / "fleet.yml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    write_fake_lock(path)
    return path


def rendered(tmp: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for fleet, versions, names in (("example", IMAGES, SINGLE), ("lab", IMAGES, SINGLE),
                                      ("pair", ["1.3.0rc12"], PAIRED), ("gateway", ["1.3.0rc12"], [None]),
                                      ("mixed", ["1.3.0rc12"], [None])):
        for version in versions:
            inventory = load_inventory(_fleet_file(tmp, fleet, version))
            for profile in names:
                try:
                    plans = build_plans(inventory, profile)
                except PlanError as exc:  # e.g. the example's draft override under baseline: refused, also pinned
                    out[f"{fleet}/{version}/{profile}"] = {"refused": exc.lines, "files": {}}
                    continue
                for host, plan in plans.items():
                    key = f"{fleet}/{version}/{profile or 'serves'}/{host}"
                    if plan.is_mirror:
                        out[key] = {"files": mirror_files(plan.settings, plan.connection)}
                    elif plan.is_gateway:
                        s = plan.settings
                        out[key] = {"files": gateway_files(gateway_options(s), backends(s.gateway_backends),
                                                           GATEWAY_KEYS)}
                    elif profile is None:  # a gateway fleet's Spark, as its own profile's deploy renders it
                        spark = build_plans(inventory, plan.settings.serves)[host]
                        out[key] = {"release_id": spark.release_id,
                                    "files": {**spark.files(redact=True), **spark_files(spark.settings)}}
                    else:
                        out[key] = {"release_id": plan.release_id, "files": plan.files(redact=True)}
    return out


def test_rendered_files_and_release_ids_are_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_golden_token_not_rendered")
    got = rendered(tmp_path)
    if os.environ.get("SPECFLEET_GOLDEN_WRITE"):
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert len(want) >= 2 * 2 * len(SINGLE) * 2, "the golden covers both fleets, both images, every profile"
    assert sorted(got) == sorted(want), "the set of (fleet, image, profile, host) cases changed"
    diffs = []
    for key in sorted(want):
        for what in ("release_id", "refused"):
            if got[key].get(what) != want[key].get(what):
                diffs.append(f"{key}: {what} {want[key].get(what)} -> {got[key].get(what)}")
        for path in sorted(set(want[key]["files"]) | set(got[key]["files"])):
            a, b = want[key]["files"].get(path, ""), got[key]["files"].get(path, "")
            if a != b:
                diffs.append(f"{key}: {path}\n" + "".join(difflib.unified_diff(
                    a.splitlines(True), b.splitlines(True), "golden", "now", n=1)))
    assert not diffs, "rendering changed (a release id restarts its host; a gateway file reloads HAProxy):\n" + "\n".join(diffs[:20])


@pytest.mark.parametrize("version", sorted(IMAGES))
def test_the_golden_covers_a_mirror_and_each_profile(version):
    want = json.loads(GOLDEN.read_text())
    assert any(k.startswith(f"lab/{version}/") and k.endswith("/mirror-01") and "olah" in json.dumps(v)
               for k, v in want.items())
    for profile in SINGLE:
        assert want[f"lab/{version}/{profile}/spark-02"]["release_id"].startswith("r-")
        assert f"example/{version}/{profile}/spark-01" in want or want[f"example/{version}/{profile}"]["refused"]
    for profile in PAIRED if version == "1.3.0rc12" else []:
        assert "mpirun" in want[f"pair/{version}/{profile}/spark-01"]["files"][
            "/var/lib/specfleet/current/specfleet-trtllm.service"]
