"""The engine as data: the vLLM profiles, `vllm_options` checked against the pinned vLLM's contract and rendered as
argv, the memory share vLLM is told, and the acceptance read from the servers' counters."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.engines import vllm_options
from specfleet.engines.catalog import ENGINES, engine_of
from specfleet.engines.command import container_command
from specfleet.engines.vllm_contract import CONTRACT, COUNTERS
from specfleet.fleet.profiles import nodes, profiles
from specfleet.overview.host.overview import acceptance_from_counters, counter_sums, counter_window, iteration_window
from specfleet.serving.render import docker_run_args, unit_text
from tests.unit.test_quoting import _settings, exec_line

VLLM_PROFILES = sorted(p for p in profiles() if engine_of(profiles()[p]).name == "vllm")


def test_every_profile_names_its_engine_and_the_vllm_profiles_are_there():
    assert all(profiles()[p]["engine"] in ENGINES for p in profiles())
    assert VLLM_PROFILES == ["vllm_baseline", "vllm_draft_target", "vllm_eagle3", "vllm_ngram"]
    assert profiles()["ngram"]["engine"] == "trtllm"
    assert profiles()["ngram"]["options"]["speculative_config"]["decoding_type"] == "NGram"
    # a two-Spark profile runs on an engine that pairs (pair/launch.py is TensorRT-LLM's MPI launch)
    assert all(engine_of(profiles()[p]).pairs for p in profiles() if nodes(p) > 1)


@pytest.mark.parametrize("profile", VLLM_PROFILES)
def test_each_vllm_profile_is_valid_and_serves_the_target_under_its_repo_id(profile):
    s = _settings(profile)
    assert vllm_options.problems(s.vllm_options, bool(profiles()[profile]["draft"]), s.vllm_contract, s.vllm_image) == []
    argv = exec_line(unit_text(s), "ExecStart")
    model = profiles()[profile]["target"]["repo"]
    start = argv.index(s.image)
    # the NGC image's entrypoint runs its command: `vllm serve MODEL` (dgx-spark-playbooks, nvidia/vllm/README.md)
    assert argv[start + 1:start + 6] == ["vllm", "serve", model, "--served-model-name", model]
    assert argv[-1] == "--gpu-memory-utilization=0.8"  # vllm_gpu_memory_utilization, NVIDIA's Spark recipes' share
    assert s.image == CONTRACT.image == "nvcr.io/nvidia/vllm:26.05.post1-py3"
    run = docker_run_args(s)
    assert not any(a.endswith("extra-llm-api-config.yml:ro") for a in run), "vLLM reads no options file"
    if profiles()[profile]["draft"]:
        spec = json.loads(argv[argv.index("--speculative-config") + 1])
        assert f"{s.data_dir}/current/draft:{spec['model'].rstrip('/')}:ro" in run


def test_the_share_is_a_setting_rendered_in_the_vllm_unit_and_the_trtllm_unit_has_none():
    vllm, trt = _settings("vllm_eagle3", vllm_gpu_memory_utilization=0.72), _settings("eagle3")
    assert exec_line(unit_text(vllm), "ExecStart")[-1] == "--gpu-memory-utilization=0.72"
    assert exec_line(unit_text(vllm), "ExecStartPre", 0)[-1] == "SPECFLEET_CONTAINER_MEMORY"  # drop-caches: the cap only
    assert "--gpu-memory-utilization" not in unit_text(trt)


def test_options_render_as_one_argument_per_value():
    argv = vllm_options.argv({"max_num_seqs": 4, "enable_prefix_caching": False, "enforce_eager": True,
                              "speculative_config": {"num_speculative_tokens": 3, "method": "ngram"}})
    assert argv == ["--max-num-seqs", "4", "--no-enable-prefix-caching", "--enforce-eager",
                    "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}']


def test_a_users_options_merge_over_the_profiles_and_reach_the_argv():
    s = _settings("vllm_eagle3", vllm_options={"max_model_len": 32768,
                                               "speculative_config": {"num_speculative_tokens": 3}})
    spec = s.vllm_options["speculative_config"]
    assert spec["num_speculative_tokens"] == 3 and spec["method"] == "eagle3"  # deep-merged over the profile's
    cmd = container_command(s)
    assert cmd[cmd.index("--max-model-len") + 1] == "32768"


def _check(fleet_file, host_vars: str, deploy: str = "deploys/vllm_eagle3.py"):
    fleet_file(f"all:\n  hosts:\n    s1: {host_vars}\n")
    return CliRunner().invoke(main, ["check", "inventory.py", deploy])


@pytest.mark.parametrize("options, line", [
    ("{speculative_config: {method: eagle4}}",
     "s1: vllm_options.speculative_config.method: 'eagle4' is not accepted (allowed: ngram, ngram_gpu, "),
    ("{speculative_config: {num_speculative_tokens: -2}}",
     "s1: vllm_options.speculative_config.num_speculative_tokens: -2 is out of range (allowed: an integer > 0)"),
    ("{speculative_config: {method: draft_model, model: null}}",
     "s1: vllm_options.speculative_config.model: None is not a non-empty string"),
    ("{speculative_config: {tensor_parallel_size: 2}}",
     "s1: vllm_options.speculative_config.tensor_parallel_size: unknown field (vLLM 0.20.1's SpeculativeConfig"),
    ("{speculative_config: {model: '/opt/x y/'}}",
     "s1: vllm_options.speculative_config.model: '/opt/x y/' has characters that are not allowed: ' '"),
    ("{max_num_seqs: 'all'}", "s1: vllm_options.max_num_seqs: 'all' is not an integer"),
    ("{enable_prefix_caching: 1}", "s1: vllm_options.enable_prefix_caching: 1 is not true or false"),
    ("{gpu_memory_utilization: 0.95}", "s1: vllm_options.gpu_memory_utilization: is set by specfleet (from "
                                       "vllm_gpu_memory_utilization"),
    ("{disable_log_requests: true}", "s1: vllm_options.disable_log_requests: unknown option (vLLM 0.20.1's "),
    ("{kv_cache_dtype: fp9}", "s1: vllm_options.kv_cache_dtype: 'fp9' is not accepted (allowed: auto, "),
    ("[max_num_seqs]", "s1: vllm_options: must be a mapping of vLLM engine arguments, got list"),
])
def test_check_refuses_bad_vllm_options_in_one_line(fleet_file, options, line):
    result = _check(fleet_file, f"{{vllm_options: {options}}}")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(line) and len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("deploy, options, line", [
    ("deploys/vllm_draft_target.py", "{speculative_config: {method: ngram, model: null}}",
     "s1: vllm_options.speculative_config.model: None is not a non-empty string"),
    ("deploys/vllm_ngram.py", "{speculative_config: {method: draft_model}}",
     "s1: vllm_options.speculative_config.model: is required for method draft_model"),
    ("deploys/vllm_ngram.py", "{speculative_config: {prompt_lookup_min: 5}}",
     "s1: vllm_options.speculative_config.prompt_lookup_min: 5 is above prompt_lookup_max 4 (allowed: min <= max)"),
    ("deploys/vllm_eagle3.py", "{speculative_config: {method: ngram, model: null}}",
     "s1: vllm_options.speculative_config.model: None is not a non-empty string"),
    ("deploys/vllm_baseline.py", "{speculative_config: {method: eagle3, model: /opt/h/, num_speculative_tokens: 3}}",
     "s1: vllm_options.speculative_config.method: eagle3 needs a draft model, and the profile has none"),
])
def test_check_refuses_a_method_that_does_not_fit_the_profile(fleet_file, deploy, options, line):
    result = _check(fleet_file, f"{{vllm_options: {options}}}", deploy)
    assert result.exit_code == 2 and result.output.startswith(line), result.output


# ---- checked wherever they are set, whatever the deploy: a hidden-style table ------------------------------------
# Each value is wrong for every vLLM profile (or for the image): a host of deploys/eagle3.py (TensorRT-LLM) that
# carries it is refused now, not at its next rollout to vLLM. (vllm_options, the key of the one line, its start)
BAD_ANYWHERE = [
    ("{speculative_config: {method: eagle4}}", "vllm_options.speculative_config.method", "'eagle4' is not accepted"),
    ("{speculative_config: {num_speculative_tokens: 0}}", "vllm_options.speculative_config.num_speculative_tokens",
     "0 is out of range"),
    ("{speculative_config: {num_speculative_tokens: two}}", "vllm_options.speculative_config.num_speculative_tokens",
     "'two' is not an integer"),
    ("{speculative_config: {tensor_parallel_size: 1}}", "vllm_options.speculative_config.tensor_parallel_size",
     "unknown field"),
    ("{speculative_config: {draft_tensor_parallel_size: 2}}",
     "vllm_options.speculative_config.draft_tensor_parallel_size", "2 is refused by vLLM 0.20.1 at start"),
    ("{speculative_config: {draft_tensor_parallel_size: 0}}",
     "vllm_options.speculative_config.draft_tensor_parallel_size", "0 is out of range"),
    ("{speculative_config: {model: 'rel/path'}}", "vllm_options.speculative_config.model", "'rel/path' is not an "
                                                                                           "absolute path"),
    ("{speculative_config: {model: '/opt/a;reboot'}}", "vllm_options.speculative_config.model",
     "'/opt/a;reboot' has characters that are not allowed"),
    ("{speculative_config: {prompt_lookup_max: 0}}", "vllm_options.speculative_config.prompt_lookup_max",
     "0 is out of range"),
    ("{speculative_config: {rejection_sample_method: synthetic}}",
     "vllm_options.speculative_config.rejection_sample_method", "'synthetic' is not accepted"),
    ("{speculative_config: {enforce_eager: 'yes'}}", "vllm_options.speculative_config.enforce_eager",
     "'yes' is not true or false"),
    ("{speculative_config: [eagle3]}", "vllm_options.speculative_config", "expected a mapping"),
    ("{max_num_seqs: 0}", "vllm_options.max_num_seqs", "0 is out of range"),
    ("{max_model_len: -1}", "vllm_options.max_model_len", "-1 is out of range"),
    ("{max_num_batched_tokens: 1.5}", "vllm_options.max_num_batched_tokens", "1.5 is not an integer"),
    ("{enable_chunked_prefill: 'no'}", "vllm_options.enable_chunked_prefill", "'no' is not true or false"),
    ("{kv_cache_dtype: int4}", "vllm_options.kv_cache_dtype", "'int4' is not accepted"),
    ("{dtype: fp64}", "vllm_options.dtype", "'fp64' is not accepted"),
    ("{disable_log_requests: true}", "vllm_options.disable_log_requests", "unknown option"),
    ("{tensor_parallel_size: 2}", "vllm_options.tensor_parallel_size", "is set by specfleet"),
    ("{api_key: sk-x}", "vllm_options.api_key", "is set by specfleet"),
    ("{port: 9000}", "vllm_options.port", "is set by specfleet"),
    ("{stream_interval: 0}", "vllm_options.stream_interval", "0 is out of range"),
]


@pytest.mark.parametrize("options, key, start", BAD_ANYWHERE, ids=[b[1] + "=" + b[0] for b in BAD_ANYWHERE])
def test_bad_vllm_options_are_refused_on_a_host_of_a_trtllm_deploy(fleet_file, options, key, start):
    result = _check(fleet_file, f"{{vllm_options: {options}}}", "deploys/eagle3.py")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"s1: {key}: {start}"), lines
    assert "checked with profile vllm_" in lines[0], "the line names the vLLM profile it was fitted to"


def test_the_table_holds_at_least_21_distinct_values():
    assert len({b[0] for b in BAD_ANYWHERE}) >= 21


@pytest.mark.parametrize("deploy", ["deploys/eagle3.py", "deploys/gateway.py", "deploys/cleanup.py"])
def test_options_that_fit_a_profile_of_their_engine_pass_whatever_the_deploy(fleet_file, deploy, monkeypatch):
    """An override of a part of a profile's options (a draft length, a context length) fits a profile of its engine
    and passes on a host that names no profile; the same fleet passes for every deploy."""
    from tests.unit import fakefleet
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
    fleet_file("all:\n  vars: {vllm_options: {max_model_len: 8192, speculative_config: {num_speculative_tokens: 3}},\n"
               "         extra_llm_api_options: {speculative_config: {max_draft_len: 3}}}\n"
               "  hosts:\n    s1: {ssh_hostname: 10.0.0.11, serves: eagle3}\n"
               "    s2: {ssh_hostname: 10.0.0.12, serves: vllm_eagle3}\n"
               "  children:\n    gateway: {hosts: {gw-1: {ssh_hostname: 10.0.0.1}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", deploy])
    assert result.exit_code == 0, result.output


def test_a_host_that_serves_a_vllm_profile_has_its_options_fitted_to_it_in_another_deploy(fleet_file, monkeypatch):
    """A host skipped by the run (it serves vllm_ngram) is checked against the profile it serves: ngram takes no draft,
    so a draft model path is refused for it, although it would fit vllm_eagle3."""
    from tests.unit import fakefleet
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
    fleet_file("all:\n  hosts:\n    s1: {ssh_hostname: 10.0.0.11, serves: eagle3}\n"
               "    s2: {ssh_hostname: 10.0.0.12, serves: vllm_ngram, vllm_options: {speculative_config: "
               "{model: /opt/draft/}}}\n"
               "  children:\n    gateway: {hosts: {gw-1: {ssh_hostname: 10.0.0.1}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("s2: vllm_options.speculative_config.model: is not used by method ngram (allowed: "
                                     "none; the methods that take a model: eagle, eagle3, draft_model, medusa, "
                                     "mlp_speculator, dflash)"), result.output


def test_bad_trtllm_options_are_refused_on_a_host_of_a_vllm_deploy(fleet_file):
    result = _check(fleet_file, "{extra_llm_api_options: {speculative_config: {max_draft_len: 0}}}")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("s1: extra_llm_api_options.speculative_config") and \
        "checked with profile " in result.output, result.output


# ---- the contract belongs to the image ----------------------------------------------------------------------
@pytest.mark.parametrize("image, start", [
    ("nvcr.io/nvidia/vllm:26.10-py3", "'nvcr.io/nvidia/vllm:26.10-py3' carries vLLM 0.31.0 (https://docs.nvidia.com/"
                                      "deeplearning/frameworks/vllm-release-notes/rel-26-10.html), which specfleet has "
                                      "no contract for (allowed: vLLM 0.20.1"),
    ("nvcr.io/nvidia/vllm:26.06-py3", "'nvcr.io/nvidia/vllm:26.06-py3' is an NGC vLLM release (26.06-py3) whose vLLM "
                                      "version specfleet does not know"),
    ("vllm/vllm-openai:v0.29.0", "'vllm/vllm-openai:v0.29.0' carries vLLM 0.29.0 (its tag v0.29.0), which specfleet "
                                 "has no contract for"),
    ("vllm/vllm-openai:latest", "'vllm/vllm-openai:latest' names no vLLM version in its tag"),
    ("registry.lab/vllm@sha256:" + "a" * 64, "'registry.lab/vllm@sha256:" + "a" * 64 + "' names no vLLM version"),
])
def test_a_vllm_image_of_a_version_without_a_contract_is_refused_in_one_line(fleet_file, image, start):
    for deploy in ("deploys/vllm_eagle3.py", "deploys/eagle3.py"):
        result = _check(fleet_file, f"{{vllm_image: '{image}'}}", deploy)
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"s1: vllm_image: {start}") and len(result.output.splitlines()) == 1, \
            result.output


@pytest.mark.parametrize("image, version", [
    ("nvcr.io/nvidia/vllm:26.05.post1-py3", "0.20.1"), ("nvcr.io/nvidia/vllm:26.05-py3", "0.20.1"),
    ("10.0.0.5:5000/nvidia/vllm:26.05-py3", "0.20.1"), ("vllm/vllm-openai:v0.20.1", "0.20.1"),
    ("docker.io/vllm/vllm-openai:v0.20.1-aarch64", "0.20.1"), ("registry.lab/team/vllm:0.20.1-custom", "0.20.1"),
])
def test_the_vllm_an_image_carries_is_read_from_its_tag(image, version):
    from specfleet.engines.vllm_images import carried, contract_of, image_problem
    assert carried(image).version == version and image_problem(image) is None and contract_of(image).version == version


@pytest.mark.parametrize("spec, line", [
    ("{method: suffix, num_speculative_tokens: 4}",
     "s1: vllm_options.speculative_config.method: suffix decoding needs the arctic_inference module, which "
     "nvcr.io/nvidia/vllm:26.05.post1-py3 is not known to carry"),
    ("{method: draft_model, model: /opt/Llama-3.1-8B-Eagle3-draft/, num_speculative_tokens: 4}",
     "s1: vllm_options.speculative_config.model: '/opt/Llama-3.1-8B-Eagle3-draft/' has 'eagle3' in it, so vLLM "
     "0.20.1 reads the draft_model draft there as method eagle3"),
    ("{model: /opt/EAGLE-small/}", "s1: vllm_options.speculative_config.model: '/opt/EAGLE-small/' has 'eagle-' in "
                                   "it, so vLLM 0.20.1 reads the draft_model draft there as method eagle"),
    ("{model: /opt/qwen-dflash/}", "s1: vllm_options.speculative_config.model: '/opt/qwen-dflash/' has 'dflash' in "
                                   "it"),
    ("{draft_tensor_parallel_size: 2}", "s1: vllm_options.speculative_config.draft_tensor_parallel_size: 2 is refused "
                                        "by vLLM 0.20.1 at start: a draft's TP is 1 or the target's, which is 1 on "
                                        "one Spark (allowed: 1)"),
])
def test_what_vllm_refuses_at_start_is_refused_by_check(fleet_file, spec, line):
    deploy = "deploys/vllm_baseline.py" if "suffix" in spec else "deploys/vllm_draft_target.py"
    result = _check(fleet_file, f"{{vllm_options: {{speculative_config: {spec}}}}}", deploy)
    assert result.exit_code == 2 and result.output.startswith(line), result.output


def test_an_eagle3_head_at_an_eagle3_path_is_what_vllm_reads_it_as():
    """The packaged vllm_eagle3 mounts its head at /opt/gpt-oss-120b-Eagle3-v3/: method eagle3 is not re-read."""
    assert "eagle3" in profiles()["vllm_eagle3"]["options"]["speculative_config"]["model"].lower()
    s = _settings("vllm_eagle3")
    assert vllm_options.problems(s.vllm_options, True, s.vllm_contract, s.vllm_image) == []


# ---- the memory share ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, start", [
    ("0", "s1: vllm_gpu_memory_utilization: input should be greater than 0"),
    ("1", "s1: vllm_gpu_memory_utilization: input should be less than 1"),
    ("'0.8'", "s1: vllm_gpu_memory_utilization: input should be a valid number"),
    (".nan", "s1: vllm_gpu_memory_utilization: input should be a finite number"),
])
def test_the_memory_share_is_refused_out_of_its_bounds(fleet_file, value, start):
    result = _check(fleet_file, f"{{vllm_gpu_memory_utilization: {value}}}")
    assert result.exit_code == 2 and result.output.startswith(start), result.output


def test_a_share_that_would_not_leave_the_reserve_is_refused_and_plan_shows_the_share():
    from specfleet.constants import GB
    from tests.unit.fakehost import make_plans
    plan = make_plans({"s1": {"vllm_gpu_memory_utilization": 0.95}}, "vllm_eagle3")["s1"]
    fit = plan.memory_fit
    total = int(121.7 * GB)
    assert fit.problem(total) == ("vllm_gpu_memory_utilization: 0.95 of MemTotal 121.7 GB would leave 6.1 GB, under "
                                  "memory_reserve_gb 8 (allowed: at most 0.934 on this host)")
    from tests.unit.test_memory import _big
    ok = _big(make_plans({"s1": {}}, "vllm_eagle3")["s1"]).memory_fit  # gpt-oss-120b's 65 GB + the head
    assert ok.problem(total) is None
    assert ok.plan_line(total, int(100 * GB)).startswith("vllm_eagle3 needs ~") and \
        "(reserve 8 GB, vllm_gpu_memory_utilization 0.8 = 97.4 GB for the server)" in ok.plan_line(total, 0)
    assert ok.problem(int(80 * GB)).startswith("memory: vllm_eagle3 needs ~"), "the weights must fit in its share"


def test_a_draft_model_without_a_model_is_refused():
    assert vllm_options.problems({"speculative_config": {"method": "draft_model", "num_speculative_tokens": 4}},
                                 True, CONTRACT, CONTRACT.image) == [("vllm_options.speculative_config.model",
                                            "is required for method draft_model (the draft's directory in the "
                                            "container)")]


def test_a_vllm_profile_on_a_pair_group_is_refused(fleet_file):
    fleet_file("all:\n  children:\n    pair_a:\n      hosts:\n"
               "        spark-1: {pair_role: head, ssh_hostname: 10.0.0.11}\n"
               "        spark-2: {pair_role: worker, ssh_hostname: 10.0.0.12}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/vllm_eagle3.py"])
    assert result.exit_code == 2 and "spark-1: profile: vllm_eagle3 runs on one Spark; spark-1 is half of pair_a" \
        in result.output, result.output


# ---- acceptance from the counters --------------------------------------------------------------------------------
EXPOSITION = """\
# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="openai/gpt-oss-120b"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="a } b"} 5.0 1700000000000
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="openai/gpt-oss-120b"} 105.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="openai/gpt-oss-120b"} 42
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="x",position="0"} 12
vllm:spec_decode_num_drafts_created 1.7e9
"""


def test_counters_are_summed_over_label_sets_and_only_the_named_ones():
    assert counter_sums(EXPOSITION, COUNTERS) == {COUNTERS[0]: 15.0, COUNTERS[1]: 105.0, COUNTERS[2]: 42.0}


def test_acceptance_is_read_as_deltas_over_the_window():
    before = {COUNTERS[0]: 15.0, COUNTERS[1]: 105.0, COUNTERS[2]: 42.0}
    after = {COUNTERS[0]: 25.0, COUNTERS[1]: 175.0, COUNTERS[2]: 77.0}
    acc = acceptance_from_counters(before, after, COUNTERS, 5.0)
    assert acc == {"drafts": 10, "draft_tokens": 70, "accepted_tokens": 35, "acceptance_length": 4.5,
                   "acceptance_rate": 0.5, "drafts_per_s": 2.0}
    assert "error" in acceptance_from_counters(after, before, COUNTERS)  # a restart during the window



def _read(drafts: int, created: float | None = 100.0, start: float | None = 50.0) -> dict:
    """The load client's read of a server whose counters stand at (drafts, 5 x drafts, 2 x drafts)."""
    lines = [f'{n}{{engine="0",model_name="m"}} {v}' for n, v in zip(COUNTERS, (drafts, 5 * drafts, 2 * drafts),
                                                                     strict=True)]
    if created is not None:
        lines += [f'{n.removesuffix("_total")}_created{{engine="0",model_name="m"}} {created}' for n in COUNTERS]
    return {"lines": lines + ([f"process_start_time_seconds {start}"] if start is not None else [])}


@pytest.mark.parametrize("before, after, error", [
    (_read(10), _read(30), None),  # one process: the deltas
    (_read(10, created=None), _read(30, created=None), None),  # no `_created`: the process start tells
    (_read(10, start=None), _read(30, start=None), None),  # no process start: `_created` tells
    (_read(10), _read(30, created=200.0, start=150.0),
     "the server restarted during the window (vllm:spec_decode_num_drafts_created changed)"),
    (_read(10), _read(30, created=200.0), "the server restarted during the window "
                                          "(vllm:spec_decode_num_drafts_created changed)"),  # reset in the process
    (_read(10, created=None), _read(30, created=None, start=150.0),
     "the server restarted during the window (process_start_time_seconds changed)"),
    (_read(30), _read(10), "the server restarted during the window (a counter went down)"),
    (_read(10, created=None, start=None), _read(30, created=None, start=None),
     "cannot tell whether the server restarted during the window: its /metrics shows neither the counters' _created "
     "samples nor process_start_time_seconds"),
    ({"error": "HTTP 503"}, _read(30), "the read of the server's counters before the window failed (HTTP 503): the "
                                       "window would count everything since the server started"),
    (_read(10), {"error": "ConnectionRefusedError: [Errno 111] Connection refused"},
     "the read of the server's counters after the window failed (ConnectionRefusedError: [Errno 111] Connection "
     "refused): the window has no end"),
    ({"lines": []}, {"lines": []}, None),  # no speculation, no counters: nothing to count, nothing to tell
])
def test_a_counter_window_is_one_servers_or_refused(before, after, error):
    got = counter_window(before, after, list(COUNTERS), 4.0)
    if error:
        assert got == {"error": error}
    elif before["lines"]:
        assert (got["drafts"], got["acceptance_length"], got["acceptance_rate"], got["drafts_per_s"]) == (20, 3.0, 0.4,
                                                                                                          5.0)
    else:
        assert got["drafts"] == 0 and got["acceptance_length"] is None


def _its(*iters: int | None) -> list[dict]:
    return [{"iter": i, "specDecodingStats": {"numDraftTokens": 3, "numAcceptedTokens": 2,
                                              "numRequestsWithDraftTokens": 1}} if i is not None else {} for i in iters]


@pytest.mark.parametrize("drain, iters, error", [
    ({"mark": 7}, _its(8, 9, 9, 10), None),  # equal ones: a pipeline-parallel loop's micro-batches
    ({}, _its(1, 2), None),  # nothing drained before the window (no warm-up)
    ({"mark": 40}, _its(41, 3, 4), "the server restarted during the window (an iteration's `iter` went from 41 to 3)"),
    ({"mark": 40}, _its(2, 3), "the server restarted during the window (an iteration's `iter` went from 40 to 2)"),
    ({"mark": 1}, _its(2, None), "cannot tell whether the server restarted during the window: an iteration stat has "
                                 "no `iter`"),
    ({"before_error": "HTTP 503"}, _its(1), "the drain of /metrics before the window failed (HTTP 503): the window "
                                            "would count the warm-up's iterations"),
    ({"mark": 1, "after_error": "TimeoutError: timed out"}, _its(2),
     "the last drain of /metrics failed (TimeoutError: timed out): the window's last iterations are missing"),
])
def test_an_iteration_window_is_one_servers_or_refused(drain, iters, error):
    got = iteration_window(drain, iters)
    assert got == {"error": error} if error else got["acceptance_length"] == 3.0 and got["iterations"] == len(iters)

def test_bench_summary_takes_acceptance_from_the_counters_and_speedup_from_its_engines_baseline():
    from specfleet.bench import rules as bench

    def raw(wall, counters=None):
        out = {"requests": [{"ttft_s": 0.1, "e2e_s": 1.0, "itl_s": [0.1] * 9, "output_tokens": 10}] * 2,
               "wall_s": wall, "iterations": [], "mem_peak": {}}
        if counters:
            out["counters"] = {"names": list(COUNTERS), "before": {"lines": counters[-1:]},
                               "after": {"lines": counters}}
        return out

    lines = [f'{COUNTERS[0]}{{engine="0"}} 8', f'{COUNTERS[1]}{{engine="0"}} 40', f'{COUNTERS[2]}{{engine="0"}} 20',
             "process_start_time_seconds 1.7e9"]
    results = [{"variant": v, "host": "h", "profile": v.split(":")[0], "engine": e, "draft_len": k,
                "host_class": "x", "overrides": {}, "buckets": {"short": bench.summarize_bucket(raw(w, c))}}
               for v, e, k, w, c in (("baseline", "trtllm", 0, 4.0, None), ("vllm_baseline", "vllm", 0, 2.0, None),
                                     ("vllm_eagle3", "vllm", 7, 1.0, lines))]
    bench.add_speedups(results)
    fig = results[2]["buckets"]["short"]
    assert (fig["acceptance_length"], fig["acceptance_rate"], fig["spec"]["source"]) == (3.5, 0.5, "counters")
    assert fig["speedup"] == 2.0, "against vllm_baseline (10 tok/s), not baseline (5 tok/s)"
    assert results[1]["buckets"]["short"]["speedup"] == 1.0



def test_status_reads_a_vllm_hosts_acceptance_from_its_counters_without_being_asked(monkeypatch):
    from specfleet.overview.host import overview

    asked: list[str] = []

    def get(url, path, timeout=5):
        asked.append(url + path)
        return 200, EXPOSITION.encode()

    monkeypatch.setattr(overview, "get", get)
    counters = ENGINES["vllm"].counters.record()
    gate = {"release": "r-1", "result": "passed", "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 10))}
    out = {"health": 200, "iter_stats": False, "lock": None, "uptime_s": 10, "release": "r-1", "gate": gate}
    got = overview.metrics(out, "http://127.0.0.1:8000", False, counters)
    assert asked == ["http://127.0.0.1:8000/metrics"]
    assert (got["acceptance_length"], got["acceptance_rate"]) == (1 + 42 / 15, 42 / 105)
    assert got["drafts_per_s"] == pytest.approx(1.5, rel=0.1)  # 15 drafts over the 10 s since the gate passed
    assert got["source"] == "the server's counters since it started"
    # TensorRT-LLM's iteration stats are drained by a read: read only when asked (--metrics)
    assert overview.metrics(out, "http://127.0.0.1:8000", False, ENGINES["trtllm"].counters.record()) is None
    assert asked == ["http://127.0.0.1:8000/metrics"]
    assert overview.metrics({**out, "health": 503}, "http://x", True, counters) is None
