"""Every profile, rendered for every supported TensorRT-LLM version, against the contract extracted from upstream
(tests/contract/trtllm_llm_args.json). The table is read by tests/contract/trtllm_contract.py, never through
specfleet/serving/options.py: a drift of specfleet's schema or of the table fails here. Also: the flag and the in-image
validator's imports per version, the draft key under either spelling, and the golden release ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from packaging.version import Version

from specfleet.fleet.profiles import nodes, profiles
from specfleet.serving.options import SCHEMAS
from specfleet.serving.validate import CONTAINER_CONFIG, SCRIPT, host_command
from tests.contract import trtllm_contract as table
from tests.unit.fakehost import make_plans
from tests.vm.trtllm_standin import image as standin_image

IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:{}"
# Every profile on every version that can run it (the two-Spark profile needs 1.3.0rc12: older ones are refused,
# tests/unit/test_pair_fleet.py); the golden release ids cover the single-Spark profiles (a pair is not rendered
# as such yet: its head renders here only for the config's contract).
CASES = [(v, p) for v in table.versions() for p in profiles() if profiles()[p]["engine"] == "trtllm"
         if Version(v) >= Version(profiles()[p].get("min_version", "0"))]
SINGLE_CASES = [(v, p) for v, p in CASES if nodes(p) == 1]


def _plan(version, profile, **vars):
    host = {"image": IMAGE.format(version), **vars}
    if nodes(profile) == 1:
        return make_plans({"spark-01": host}, profile)["spark-01"]
    pair = {"spark-01": {**host, "pair_role": "head"}, "spark-02": {**host, "pair_role": "worker"}}
    return make_plans(pair, profile, groups={"pair_a": list(pair)})["spark-01"]


def _config(plan) -> dict:
    return yaml.safe_load(next(t for path, t in plan.files().items() if path.endswith("extra-llm-api-config.yml")))


def _keys(d, prefix=""):
    for k, v in d.items():
        yield prefix + k
        if isinstance(v, dict):
            yield from _keys(v, prefix + k + ".")


def test_the_table_and_specfleet_support_the_same_versions():
    assert sorted(SCHEMAS) == table.versions()


@pytest.mark.parametrize("version,profile", CASES)
def test_every_key_of_every_rendered_profile_is_accepted_by_every_release_read(version, profile):
    config = _config(_plan(version, profile))
    assert list(_keys(config)), "a profile renders options"
    assert table.errors(config, version) == [], (version, profile, config)


def test_the_check_fails_on_another_versions_names():
    """What today's tree rendered on 1.3.0rc12 (1.2.0rc6's names): refused by both releases read."""
    config = _config(_plan("1.2.0rc6", "draft_target"))
    errs = table.errors(config, "1.3.0rc12")
    assert errs == ["speculative_config.decoding_type: invalid decoding type 'DraftTarget' (accepted: AUTO, "
                    "Draft_Target, Eagle, Eagle3, MTP, NGram, SaveState)"], errs
    assert table.errors({"kv_cache_config": {"onboard_blocks": True}}, "1.3.0rc12") == [
        "kv_cache_config.onboard_blocks: unknown key, not a field of KvCacheConfig (extra inputs are not permitted) "
        "(1.3.0rc13)"]


@pytest.mark.parametrize("version,profile", CASES)
def test_the_unit_passes_the_yaml_with_the_versions_flag(version, profile):
    plan = _plan(version, profile)
    unit = next(t for path, t in plan.files().items() if path.endswith(".service"))
    flag = plan.settings.llm_schema.contract.serve_flag
    assert flag in table.serve_flags(version)
    assert f" {flag} /etc/specfleet/extra-llm-api-config.yml" in unit
    other = {"--config", "--extra_llm_api_options"} - {flag}
    assert not any(f" {o} " in unit for o in other)


def _run_in_image_script(tmp_path, config: dict, version: str, module: str, names: list[str]):
    """specfleet's in-image script against the STAND-IN tensorrt_llm package, the stand-in set to `version`."""
    cfg = tmp_path / "cfg.yml"
    cfg.write_text(yaml.safe_dump(config))
    behaviour = tmp_path / "standin.json"
    behaviour.write_text(json.dumps({"version": version}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRTLLM_STANDIN_SERVE")}
    env.update(PYTHONPATH=str(standin_image.PYLIB_DIR), TRTLLM_STANDIN_CONFIG=str(behaviour))
    return subprocess.run([sys.executable, "-c", SCRIPT.replace(CONTAINER_CONFIG, str(cfg)), module, *names],
                          env=env, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))


@pytest.mark.parametrize("version,profile", CASES)
def test_in_image_validation_imports_the_versions_names_and_accepts_the_profile(tmp_path, version, profile):
    """The host command passes the table's module and names; the script run against the STAND-IN package, set to
    this version (its validator reads the same table), says OK for the rendered profile."""
    plan = _plan(version, profile)
    module, names = table.validator_imports(version)
    contract = plan.settings.llm_schema.contract
    assert (contract.validator_module, list(contract.validator_names)) == (module, names)
    cmd = host_command("spark-01", "/var/lib/specfleet", "/x/cfg.yml", "c", "img", False, contract)
    assert f" {module} {' '.join(names)} 2>&1)" in cmd  # after the script: its argv
    r = _run_in_image_script(tmp_path, _config(plan), version, module, names)
    assert (r.returncode, r.stdout.splitlines()[-1:]) == (0, ["OK"]), (r.stdout, r.stderr)


def test_in_image_validation_refuses_1_2_names_on_a_1_3_image(tmp_path):
    module, names = table.validator_imports("1.3.0rc12")
    r = _run_in_image_script(tmp_path, _config(_plan("1.2.0rc6", "draft_target")), "1.3.0rc12", module, names)
    assert r.returncode == 1 and "invalid decoding type 'DraftTarget'" in r.stdout.splitlines()[-1], r.stdout


# ------------------------------------------------------------------ the draft key under either spelling
@pytest.mark.parametrize("key", ["speculative_model", "speculative_model_dir"])
def test_1_3_draft_key_either_spelling_is_mounted_and_rendered_once(key):
    plan = _plan("1.3.0rc12", "draft_target", extra_llm_api_options={"speculative_config": {key: "/opt/my-draft/"}})
    assert plan.settings.draft_container_dir == "/opt/my-draft/"
    spec = _config(plan)["speculative_config"]
    assert spec == {"decoding_type": "Draft_Target", "max_draft_len": 4, "speculative_model": "/opt/my-draft/"}
    unit = next(t for path, t in plan.files().items() if path.endswith(".service"))
    assert "/current/draft:/opt/my-draft:ro" in unit


def test_1_2_draft_key_is_mounted_and_the_1_3_name_refused(fleet_file):
    plan = _plan("1.2.0rc6", "eagle3", extra_llm_api_options={"speculative_config": {"speculative_model_dir": "/d/"}})
    assert plan.settings.draft_container_dir == "/d/"
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file("all:\n  hosts:\n    s1: {extra_llm_api_options: {speculative_config: {speculative_model: /d/}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2 and "s1: extra_llm_api_options.speculative_config.speculative_model: unknown option" \
        in result.output, result.output


def test_both_spellings_at_once_are_one_problem(fleet_file):
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file("all:\n  vars: {image: 'nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12'}\n  hosts:\n    s1: "
               "{extra_llm_api_options: {speculative_config: {speculative_model: /a/, speculative_model_dir: /b/}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/draft_target.py"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("s1: extra_llm_api_options.speculative_config: speculative_model and "
                                     "speculative_model_dir are the same option (the draft checkpoint dir): give one")


# ------------------------------------------------------------------ golden: what each version renders, and its id
GOLDEN = {  # (version, profile) -> (release id, decoding_type, draft key, flag), at rendering 6
    ("1.2.0rc6", "eagle3"): ("r-d5b118cd10dd", "Eagle", "speculative_model_dir", "--extra_llm_api_options"),
    ("1.2.0rc6", "draft_target"): ("r-27842b9190ea", "DraftTarget", "speculative_model_dir", "--extra_llm_api_options"),
    ("1.2.0rc6", "baseline"): ("r-6fe24fc559c2", None, None, "--extra_llm_api_options"),
    ("1.3.0rc12", "eagle3"): ("r-e867e3ef8f5e", "Eagle3", "speculative_model", "--config"),
    ("1.3.0rc12", "draft_target"): ("r-f1bd8ab9aaea", "Draft_Target", "speculative_model", "--config"),
    ("1.3.0rc12", "baseline"): ("r-ec80484deca8", None, None, "--config"),
    ("1.2.0rc6", "ngram"): ("r-4bb9c429f77c", "NGram", None, "--extra_llm_api_options"),
    ("1.3.0rc12", "ngram"): ("r-1197b901ead8", "NGram", None, "--config"),
}


@pytest.mark.parametrize("version,profile", SINGLE_CASES)
def test_golden_release_ids(version, profile):
    plan = _plan(version, profile)
    spec = _config(plan).get("speculative_config") or {}
    draft = next((k for k in ("speculative_model", "speculative_model_dir") if k in spec), None)
    got = (plan.release_id, spec.get("decoding_type"), draft, plan.settings.llm_schema.contract.serve_flag)
    assert got == GOLDEN[(version, profile)], "a rendering change: update GOLDEN and docs/upgrades.md"


def test_the_table_agrees_with_specfleet_on_the_version_differences():
    """The cases of test_llm_versions.py's version differences, answered by the extracted table too."""
    from tests.unit.test_llm_versions import test_version_differences_read_from_upstream as product

    cases = product.pytestmark[0].args[1]
    assert len(cases) >= 10
    for options, ok_12, ok_13 in cases:
        assert (not table.errors(options, "1.2.0rc6"), not table.errors(options, "1.3.0rc12")) == (ok_12, ok_13), options


# ------------------------------------------------------------------ specfleet's contract vs the table, field by field
TABLE_ONLY = {("TorchLlmArgs", "iter_stats_max_iterations")}  # in the table for the stand-in's /metrics only


def _product_spec(spec) -> dict:
    kind, nullable, cons = spec
    cons = dict(cons)
    out: dict = {"nullable": bool(nullable)}
    if kind == "list[int]":
        out.update(type="list", items={"type": "int", **({"gt": cons.pop("item_gt")} if "item_gt" in cons else {})})
        if "min_length" in cons:
            out["min_items"] = cons.pop("min_length")
    elif isinstance(kind, tuple):
        out.update({"enum": {"type": "enum", "values": sorted(kind[1])}, "model": {"type": "model", "model": kind[1]}}[kind[0]])
    else:
        out["type"] = kind
    out.update(cons)
    return out


def _table_spec(specs: list[dict], model_names: dict) -> dict:
    """The spec a field has in every release read (enum values: those all accept); ValueError if they differ."""
    norm = []
    for spec in specs:
        spec = {k: v for k, v in spec.items() if k not in ("note", "default")}
        spec["nullable"] = bool(spec.get("nullable"))
        if spec["type"] == "model":
            spec["model"] = model_names.get(spec["model"], spec["model"])
        if spec["type"] == "enum":
            spec["values"] = sorted(set.intersection(*(set(s["values"]) for s in specs)))
        norm.append(spec)
    if any(n != norm[0] for n in norm):
        raise ValueError(f"the releases read differ: {norm}")
    return norm[0]


@pytest.mark.parametrize("version", table.versions())
def test_specfleet_models_exactly_the_fields_the_releases_read_share(version):
    c = SCHEMAS[version].contract
    rels = [table.table()["releases"][r] for r in table.releases(version)]
    product = {"TorchLlmArgs": {**{k: _product_spec(v) for k, v in c.top.items()},
                                "speculative_config": {"type": "decoding", "nullable": True}}}
    product.update({m: {k: _product_spec(v) for k, v in f.items()} for m, f in c.models.items()})
    for name, fields in c.decoding.items():
        cls = rels[0]["decoding"]["names"][name]
        product[cls] = {"max_draft_len": _product_spec(c.max_draft_len), c.draft_field: {"type": "str", "nullable": True},
                        **{k: _product_spec(v) for k, v in fields.items()}}
    for model, fields in product.items():
        shared = set.intersection(*(set(r["models"][model]["fields"]) for r in rels)) - {f for m, f in TABLE_ONLY if m == model}
        assert set(fields) == shared, (model, set(fields) ^ shared)
        for name, spec in fields.items():
            want = _table_spec([r["models"][model]["fields"][name] for r in rels], {})
            if want.get("type") == "model":
                spec = dict(spec, model=spec["model"])
            assert spec == want, (version, model, name)
    # decoding names, rules and defaults
    assert set(c.decoding) == set(table.decoding_types(version))
    for name in c.decoding:
        for kind in ("positive", "present"):
            want = set().union(*(set(r["decoding"]["rules"][name][kind]) for r in rels))  # required if any requires
            assert set(c.rules[name][kind]) == want, (version, name, kind)
    for (name, field), value in c.defaults.items():
        cls = rels[0]["decoding"]["names"][name]
        assert {r["models"][cls]["fields"][field]["default"] for r in rels} == {value}
    assert table.draft_keys(version) == sorted(c.draft_keys)
    assert {dict(r["decoding"]["translations"]).get("Eagle") for r in rels} == {c.loader_translations.get("Eagle")}


def test_a_pinned_1_3_image_keeps_its_contract():
    """The lock pins an image by digest (`name@sha256:...`, no tag): the host still renders 1.3.0rc12's names."""
    from specfleet.plan import pinned_image

    plan = _plan("1.3.0rc12", "draft_target")
    plan.settings = plan.settings.model_copy(update={"image": pinned_image(plan.settings.image, "sha256:" + "a" * 64)})
    assert "@sha256:" in plan.settings.image
    unit = next(t for path, t in plan.files().items() if path.endswith(".service"))
    assert " --config /etc/specfleet/extra-llm-api-config.yml" in unit and ":/opt/Llama-3.1-8B-Instruct-FP4:ro" in unit


def test_a_host_level_spelling_replaces_the_groups():
    """Levels of the fleet file merge the draft key's spellings as one key: the host's wins, no 'give one'."""
    from specfleet.serving.options import deep_merge

    group = {"speculative_config": {"speculative_model_dir": "/a/", "max_draft_len": 3}}
    host = {"speculative_config": {"speculative_model": "/b/"}}
    assert deep_merge(group, host) == {"speculative_config": {"max_draft_len": 3, "speculative_model": "/b/"}}
