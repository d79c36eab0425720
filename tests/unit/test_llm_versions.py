"""The TRT-LLM options schema follows the image's TensorRT-LLM version (llm_options.SCHEMAS)."""

import pytest
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.serving.options import DEFAULT_VERSION, SCHEMAS, image_version, schema_for_image

R13 = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"
EAGLE3 = "{decoding_type: Eagle3, max_draft_len: 5, speculative_model_dir: /opt/gpt-oss-120b-Eagle3/}"


@pytest.mark.parametrize("image,version", [
    ("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6", "1.2.0rc6"),
    (R13, "1.3.0rc12"),
    ("registry.lab.example:5000/mirror/release:1.3.0rc12-lab", "1.3.0rc12"),
    (R13 + "@sha256:" + "a" * 64, "1.3.0rc12"),
    ("localhost/trtllm-standin:1.2.0rc6-standin", "1.2.0rc6"),
    ("nvcr.io/nvidia/tensorrt-llm/release", None),
    ("nvcr.io/nvidia/tensorrt-llm/release:latest", None),
    ("nvcr.io/nvidia/tensorrt-llm/release@sha256:" + "a" * 64, None),
])
def test_image_version(image, version):
    assert image_version(image) == version


@pytest.mark.parametrize("image", ["x/release:1.4.0", "x/release:1.1.0", "x/release:latest", "x/release", 42])
def test_unknown_versions_get_the_default_schema(image):
    assert schema_for_image(image) is SCHEMAS[DEFAULT_VERSION] and DEFAULT_VERSION == "1.2.0rc6"


@pytest.mark.parametrize("image,contract", [
    ("x/release:1.3.0rc13", "1.3.0rc12"),  # a release the 1.3.0rc12 contract was read from
    ("x/release:1.3.0rc11", "1.3.0rc12"),
    ("x/release:1.2.0rc5", "1.2.0rc6"),
    ("x/release:1.2.0rc6.post1", "1.2.0rc6"),
    ("x/release:1.3.0rc121", "1.3.0rc12"),  # a guess by the X.Y line
    ("x/release:1.3.1", "1.3.0rc12"),
    ("x/release:1.2.1", "1.2.0rc6"),
])
def test_contract_of_other_versions(image, contract):
    assert schema_for_image(image).version == contract


def test_1_3_names_differ_from_1_2():
    """The differences read from upstream (serving/contract.py): decoding names, the draft key, enum values."""
    old, new = SCHEMAS["1.2.0rc6"], SCHEMAS["1.3.0rc12"]
    assert set(new.decoding_types) ^ set(old.decoding_types) == {"Eagle3", "Draft_Target", "DraftTarget"}
    assert "UserProvided" not in old.decoding_types  # drafter: a Python object, no YAML gives one
    assert set(old.options.model_fields) == set(new.options.model_fields)
    assert (old.contract.draft_keys, new.contract.draft_keys) == (("speculative_model_dir",),
                                                                  ("speculative_model", "speculative_model_dir"))
    assert (old.contract.serve_flag, new.contract.serve_flag) == ("--extra_llm_api_options", "--config")
    kv_old = old.options.model_fields["kv_cache_config"].annotation.model_fields
    kv_new = new.options.model_fields["kv_cache_config"].annotation.model_fields
    assert set(kv_old) - set(kv_new) == {"onboard_blocks"}  # 1.3.0rc13's KvCacheConfig has none


def _check(fleet_file, text):
    fleet_file(text)
    return CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])


def test_eagle3_refused_by_the_default_image_with_a_hint(fleet_file):
    result = _check(fleet_file, f"all:\n  hosts:\n    s1: {{extra_llm_api_options: {{speculative_config: {EAGLE3}}}}}\n")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "s1: extra_llm_api_options.speculative_config: decoding_type 'Eagle3' is not accepted by trtllm-serve 1.2.0rc6 "
        "(allowed: Eagle, DraftTarget, NGram, MTP, SaveState, AUTO; image release:1.3.0rc12 accepts it)")


def test_eagle3_accepted_with_the_1_3_image(fleet_file):
    result = _check(fleet_file, f"all:\n  vars: {{image: '{R13}'}}\n  hosts:\n"
                                f"    s1: {{extra_llm_api_options: {{speculative_config: {EAGLE3}}}}}\n")
    assert result.exit_code == 0, result.output


def test_eagle3_rules_same_as_eagle_on_1_3(fleet_file):
    result = _check(fleet_file, f"all:\n  vars: {{image: '{R13}'}}\n  hosts:\n"
                                "    s1: {extra_llm_api_options: {speculative_config: {decoding_type: Eagle3, max_draft_len: 0,"
                                " speculative_model_dir: /opt/x/, bogus: 1}}}\n")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert any(line.startswith("s1: extra_llm_api_options.speculative_config.bogus: unknown option") for line in lines), lines


def test_draft_target_name_on_1_3_names_the_right_one(fleet_file):
    result = _check(fleet_file, f"all:\n  vars: {{image: '{R13}'}}\n  hosts:\n"
                                "    s1: {extra_llm_api_options: {speculative_config: {decoding_type: DraftTarget}}}\n")
    assert result.exit_code == 2
    assert "decoding_type 'DraftTarget' is not accepted by trtllm-serve 1.3.0rc12" in result.output
    assert "1.3.0rc12 names it Draft_Target" in result.output


def test_the_shipped_profiles_pass_on_1_3(fleet_file):
    fleet_file(f"all:\n  vars: {{image: '{R13}'}}\n  hosts:\n    s1:\n")
    for deploy in ("eagle3", "draft_target", "baseline"):
        result = CliRunner().invoke(main, ["check", "inventory.py", f"deploys/{deploy}.py"])
        assert result.exit_code == 0, (deploy, result.output)


@pytest.mark.parametrize("options,ok_12,ok_13", [
    ({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 3}}, False, True),  # size: int = 0 / PositiveInt = 2
    ({"speculative_config": {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 0}}, False, False),
    ({"moe_config": {"backend": "AUTO"}}, False, True),
    ({"moe_config": {"backend": "DENSEGEMM"}}, False, True),
    ({"moe_config": {"backend": "WIDEEP"}}, True, True),
    ({"kv_cache_config": {"onboard_blocks": False}}, True, False),  # 1.3.0rc13's KvCacheConfig has none
    ({"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 0}}, False, False),
    ({"speculative_config": {"decoding_type": "UserProvided"}}, False, False),  # drafter: a Python object
    ({"cuda_graph_config": {"max_batch_size": None}}, False, False),  # upstream: int
    ({"kv_cache_config": {"free_gpu_memory_fraction": 0.0}}, True, True),  # upstream: 0 <= v <= 1
])
def test_version_differences_read_from_upstream(options, ok_12, ok_13):
    from pydantic import ValidationError

    for version, ok in (("1.2.0rc6", ok_12), ("1.3.0rc12", ok_13)):
        try:
            SCHEMAS[version].options.model_validate(options)
            accepted = True
        except ValidationError:
            accepted = False
        assert accepted == ok, (version, options)
