"""`specfleet check` refuses bad input with one line per problem naming the host and the key."""

import pytest
from click.testing import CliRunner

from specfleet.cli import main

BAD = [
    # (what, host vars (YAML flow mapping), expected key in the error)
    ("misspelled var", "{serve_prot: 9000}", "serve_prot"),
    ("port out of range", "{serve_port: 70000}", "serve_port"),
    ("port as string", "{serve_port: '8000'}", "serve_port"),
    ("bind to a hostname", "{serve_host: localhost}", "serve_host"),
    ("gpus not a bool", "{gpus: 'yes'}", "gpus"),
    ("unknown top-level TRT-LLM option", "{extra_llm_api_options: {enable_magic: true}}", "extra_llm_api_options.enable_magic"),
    ("unknown nested TRT-LLM option", "{extra_llm_api_options: {kv_cache_config: {enable_blok_reuse: false}}}",
     "extra_llm_api_options.kv_cache_config.enable_blok_reuse"),
    ("unknown speculative option", "{extra_llm_api_options: {speculative_config: {draft_len: 3}}}",
     "extra_llm_api_options.speculative_config.draft_len"),
    ("Eagle3 not accepted by 1.2.0rc6", "{extra_llm_api_options: {speculative_config: {decoding_type: Eagle3}}}",
     "extra_llm_api_options.speculative_config"),
    ("max_draft_len zero", "{extra_llm_api_options: {speculative_config: {max_draft_len: 0}}}",
     "extra_llm_api_options.speculative_config"),
    ("draft dir removed", "{extra_llm_api_options: {speculative_config: {speculative_model_dir: null}}}",
     "extra_llm_api_options.speculative_config"),
    ("fraction above 1", "{extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: 1.5}}}",
     "extra_llm_api_options.kv_cache_config.free_gpu_memory_fraction"),
    ("fraction zero", "{extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: 0}}}",
     "extra_llm_api_options.kv_cache_config.free_gpu_memory_fraction"),
    ("bool as int in TRT-LLM options", "{extra_llm_api_options: {enable_autotuner: 1}}", "extra_llm_api_options.enable_autotuner"),
    ("int as bool in TRT-LLM options", "{extra_llm_api_options: {max_num_tokens: true}}", "extra_llm_api_options.max_num_tokens"),
    ("TRT-LLM options not a mapping", "{extra_llm_api_options: [1, 2]}", "extra_llm_api_options"),
    ("NGram without ngram size", "{extra_llm_api_options: {speculative_config: {decoding_type: NGram, max_draft_len: 3}}}",
     "extra_llm_api_options.speculative_config"),
    ("relative data_dir", "{data_dir: var/lib/specfleet}", "data_dir"),
    ("hub endpoint not a URL", "{hub_endpoint: huggingface.co}", "hub_endpoint"),
    ("bad tiktoken hash", "{tiktoken_sha256: {o200k_base.tiktoken: abc, cl100k_base.tiktoken: abc}}", "tiktoken_sha256"),
    ("root as operator", "{operator_users: [root]}", "operator_users"),
    ("bad user name", "{operator_users: ['Bad User']}", "operator_users.0"),
    ("token in container env", "{container_env: {HF_TOKEN: x}}", "container_env"),
    ("zero health timeout", "{health_timeout_sec: 0}", "health_timeout_sec"),
    ("keep fewer than 2 releases", "{keep_releases: 1}", "keep_releases"),
    ("image with spaces", "{image: 'nvcr.io/x y'}", "image"),
    ("token file missing", "{hf_token_file: /nonexistent/token}", "hf_token_file"),
    ("bad rollback id", "{rollback_to: latest}", "rollback_to"),
]


@pytest.mark.parametrize("what,host_vars,key", BAD, ids=[b[0] for b in BAD])
def test_check_refuses(fleet_file, what, host_vars, key):
    fleet_file(f"all:\n  hosts:\n    good-1:\n    bad-host: {host_vars}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line]
    assert any(line.startswith(f"bad-host: {key}: ") for line in lines), lines
    assert not any(line.startswith("good-1") for line in lines), "only the bad host is reported"
    assert "Traceback" not in result.output


def test_table_has_at_least_20_distinct_cases():
    assert len({b[0] for b in BAD}) >= 20 and len({b[1] for b in BAD}) == len(BAD)


def test_missing_token_is_refused(fleet_file, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2
    assert result.output.strip() == ("spark-01: hf_token: no Hugging Face token: export HF_TOKEN or set hf_token_file "
                                     "(or hf_token_required: false for public models)")


def test_all_problems_reported_at_once(fleet_file):
    fleet_file("all:\n  vars: {serve_port: 0}\n  hosts:\n    a:\n    b: {gpus: 3}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert "a: serve_port: input should be greater than or equal to 1" in lines
    assert any(line.startswith("b: gpus: ") for line in lines) and any(line.startswith("b: serve_port: ") for line in lines)


def test_valid_fleet_passes(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n    spark-02: {extra_llm_api_options: {speculative_config: {max_draft_len: 3}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output
    assert "2 host(s) valid" in result.output


def test_check_accepts_every_shipped_deploy(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    for deploy in ("eagle3", "draft_target", "baseline", "cleanup"):
        result = CliRunner().invoke(main, ["check", "inventory.py", f"deploys/{deploy}.py"])
        assert result.exit_code == 0, (deploy, result.output)
