"""vLLM's contract for `vllm serve` and `--speculative-config`, per vLLM version, as data with provenance; and which
vLLM an image carries (engines/vllm_images.py): a `vllm_image` of a version with no contract here is refused.

The packaged image: `nvcr.io/nvidia/vllm:26.05.post1-py3`, the tag NVIDIA's DGX Spark vLLM playbook runs on one Spark
(NVIDIA/dgx-spark-playbooks@0db7c141, nvidia/vllm/README.md:141-151). NVIDIA's release notes for vLLM Release 26.05
list vLLM 0.20.1 (https://docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/rel-26-05.html). No notes are
published for `.post1`: that it carries the same 0.20.1 is a GUESS (a re-spin), and the contract is 0.20.1's.

The source: vllm-project/vllm v0.20.1 (commit f98b2747f, the sdist's vllm/_version.py), read as the PyPI sdist
vllm-0.20.1.tar.gz. Line numbers below are that tree's.
- `vllm/config/speculative.py` (SpeculativeConfig, a pydantic dataclass with extra="forbid",
  vllm/config/utils.py:68-69): fields :73-204, methods :34-65, which need a model :461-486, num_speculative_tokens
  :76 and :862-881, ngram's prompt lookup :491-517 and :132-135.
- `vllm/engine/arg_utils.py` (EngineArgs, flags from the config dataclasses by get_kwargs, :320-385: a bool is
  argparse.BooleanOptionalAction, so --x / --no-x) and `vllm/entrypoints/openai/cli_args.py` (--host, --port, the
  positional model).
- `vllm/v1/spec_decode/metrics.py` (SpecDecodingProm, :144-197): the counters, exposed with `_total`.

Where the source leaves room, the stricter reading is taken (marked "stricter"): `method` and `num_speculative_tokens`
are required (vLLM infers the method from the model's name or config, and the token count from a draft's n_predict).
Only the engine arguments below are modelled; extend the table, with its source line, when a genuine one is missing.

Specs: (kind, constraints): kind "bool", "int", "float", "str", or a tuple of allowed values; constraints gt/ge/le/lt.
"""

from __future__ import annotations

from dataclasses import dataclass

Spec = tuple[str | tuple[str, ...], dict[str, float]]

_POS: Spec = ("int", {"gt": 0})
_GE1: Spec = ("int", {"ge": 1})
_BOOL: Spec = ("bool", {})
_STR: Spec = ("str", {})

# speculative.py:57-65 (SpeculativeMethod), :54-56 (EagleModelTypes), :52 (ngram_gpu); the MTP kinds other than `mtp`
# are rewritten to `mtp` with a deprecation warning (:455-459), so only `mtp` is accepted here (stricter).
METHODS = ("ngram", "ngram_gpu", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "dflash",
           "mtp", "extract_hidden_states")
# :461-486: without a model, mtp uses the target, ngram/ngram_gpu/suffix/extract_hidden_states a placeholder; every
# other method raises "num_speculative_tokens was provided but without speculative model".
NEEDS_MODEL = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash")

SPECULATIVE: dict[str, Spec] = {
    "method": (METHODS, {}),  # :82
    "model": _STR,  # :79; a path in the container here (specfleet mounts the pinned draft there)
    "num_speculative_tokens": _POS,  # :76 Field(gt=0)
    "draft_tensor_parallel_size": _GE1,  # :90 Field(ge=1); 1 or the target's TP (:813-820), which is 1 on one Spark
    "max_model_len": _GE1,  # :107 Field(ge=1)
    "enforce_eager": _BOOL,  # :73
    "disable_padded_drafter_batch": _BOOL,  # :120
    "prompt_lookup_max": _GE1,  # :132 Field(ge=1)
    "prompt_lookup_min": _GE1,  # :135 Field(ge=1)
    "parallel_drafting": _BOOL,  # :143
    "rejection_sample_method": (("strict", "probabilistic"), {}),  # :186; "synthetic" is a test mode, left out
}
# :813-820 (_verify_and_get_draft_tp): a draft TP given must be 1 or the target's TP, which specfleet sets to 1 on one
# Spark (RESERVED's tensor_parallel_size): so 1 only
DRAFT_TP = (1,)
# :714-719: suffix decoding raises ImportError without the arctic_inference module (importlib find_spec)
SUFFIX_NEEDS = "arctic_inference"
# :580-622: for a method other than eagle/eagle3/dflash, vLLM re-reads the method from the draft's path, a
# case-insensitive substring test of the model string as given (the mount point here): "eagle-" -> eagle, "eagle3" ->
# eagle3, "dflash" -> dflash (then the draft's config is wrapped as an EAGLE head), also for method draft_model
REDETECTED = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"))
# Not modelled (refused as unknown, stricter): revision/code_revision (the draft is mounted from the lock's pin),
# quantization (auto-detected from the draft's checkpoint, model.py:932-1004), tensor_parallel_size (refused upstream
# too, :864-868), the suffix_decoding_* and synthetic_* fields, speculative_token_tree, draft_load_config, moe_backend.

ENGINE: dict[str, Spec] = {
    "max_model_len": _POS,  # arg_utils.py:767 (ModelConfig, model.py:184; "auto"/-1 and "32k" forms not modelled)
    "max_num_seqs": _GE1,  # arg_utils.py:1290-1296, scheduler.py:63 ge=1
    "max_num_batched_tokens": _GE1,  # arg_utils.py:1283-1289, scheduler.py:49 ge=1
    "enable_prefix_caching": _BOOL,  # arg_utils.py:1072-1078, BooleanOptionalAction
    "enable_chunked_prefill": _BOOL,  # arg_utils.py:1313-1319
    "async_scheduling": _BOOL,  # arg_utils.py:1334-1336
    "enforce_eager": _BOOL,  # arg_utils.py:773
    "trust_remote_code": _BOOL,  # arg_utils.py:750-752
    "kv_cache_dtype": (("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"), {}),  # cache.py:18-34
    "dtype": (("auto", "half", "float16", "bfloat16", "float", "float32"), {}),  # model.py:87 (ModelDType)
    "max_cudagraph_capture_size": _GE1,  # arg_utils.py:1351
    "stream_interval": _GE1,  # arg_utils.py:1338
    "enable_log_requests": _BOOL,  # arg_utils.py:2428-2437 (--disable-log-requests does not exist in 0.20.1)
}

# What specfleet renders itself, and why (engines/command.py)
RESERVED = {
    "host": "from serve_host", "port": "from serve_port",
    "model": "the profile's target, mounted from the lock's pin",
    "served_model_name": "the target's repo id, the name every engine serves it under (with HF_HUB_OFFLINE vLLM "
                         "would otherwise name it by its snapshot path)",
    "gpu_memory_utilization": "from vllm_gpu_memory_utilization, which the preflight checks against the host's "
                              "MemTotal and memory_reserve_gb",
    "tensor_parallel_size": "one Spark has one GPU; the two-Spark pair runs on TensorRT-LLM only",
    "download_dir": "the models come from the host's Hub cache, mounted read-only",
    "api_key": "the fleet's gateways check the API keys",
}

# SpecDecodingProm (v1/spec_decode/metrics.py:155, :164, :173), Counters exposed with prometheus_client's `_total`;
# labels model_name and engine (v1/metrics/loggers.py:429-435). The series exist only with a speculative config.
COUNTERS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total")


# What the release step's in-image check imports (engines/host/validate_vllm_args.py): what `vllm serve` builds from its
# arguments before loading anything (vllm/entrypoints/cli/serve.py:14, :125, :138; cli_args.py:317, :364;
# utils/argparse_utils.py:113; engine/arg_utils.py:1452)
VALIDATOR = ("vllm.entrypoints.openai.cli_args:make_arg_parser",
             "vllm.entrypoints.openai.cli_args:validate_parsed_serve_args",
             "vllm.engine.arg_utils:AsyncEngineArgs", "vllm.utils.argparse_utils:FlexibleArgumentParser")


@dataclass(frozen=True)
class Contract:
    version: str
    image: str  # the image specfleet runs this version as by default
    source: str
    methods: tuple[str, ...]
    needs_model: tuple[str, ...]
    speculative: dict[str, Spec]
    engine: dict[str, Spec]
    reserved: dict[str, str]
    validator: tuple[str, ...]
    draft_tp: tuple[int, ...]  # the draft_tensor_parallel_size values it accepts on one Spark
    suffix_needs: str  # the module suffix decoding imports
    redetected: tuple[tuple[str, str], ...]  # (substring of a draft's path, the method vLLM then takes)
    redetect_skips: tuple[str, ...] = ("eagle", "eagle3", "dflash")  # methods whose draft path is not re-read
    # methods that refuse disable_padded_drafter_batch: true at start (); not read for 0.20.1: none refused there
    padded_needed: tuple[str, ...] = ()


CONTRACT = Contract(version="0.20.1", image="nvcr.io/nvidia/vllm:26.05.post1-py3",
                    source="vllm-project/vllm v0.20.1 (f98b2747f)", methods=METHODS, needs_model=NEEDS_MODEL,
                    speculative=SPECULATIVE, engine=ENGINE, reserved=RESERVED, validator=VALIDATOR,
                    draft_tp=DRAFT_TP, suffix_needs=SUFFIX_NEEDS, redetected=REDETECTED)

# ---- vLLM 0.28.0: the version NVIDIA's recipe catalog for Spark runs (vllm/vllm-openai:v0.28.0) ----------------------
# Read from the PyPI sdist vllm-0.28.0.tar.gz (sha256 ac96dd0e...634a; vllm/_version.py: commit 2cf0a6915), lines that
# tree's, files as for 0.20.1 above. Differences: methods dspark (new) and custom_class (left out, stricter: it imports
# a user's class by dotted path, :720-745); rejection_sample_method takes standard/synthetic/block (0.20.1's
# "probabilistic" moved to the new draft_sample_method); --spec-method/--spec-model/--spec-tokens (new) are merged
# into the speculative config and raise when it names the same key, so specfleet renders only --speculative-config.

# vLLM 0.28.0 (vllm-project/vllm 2cf0a6915, PyPI sdist vllm-0.28.0.tar.gz); lines are that tree's
# speculative.py:69-79 (SpeculativeMethod), :63-68; MTP aliases rewritten to mtp (:752-756), so only `mtp` (stricter);
# custom_class (:75, imports a user class by dotted path, :720-745) left out (stricter)
METHODS_0_28 = ("ngram", "ngram_gpu", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3",
                "dflash", "dspark", "mtp", "extract_hidden_states")
# :758-798: without a model, mtp/dspark use the target, ngram/ngram_gpu/suffix/extract_hidden_states a placeholder;
# every other method raises "num_speculative_tokens was provided but without speculative model"
NEEDS_MODEL_0_28 = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash")
SPECULATIVE_0_28: dict[str, Spec] = {
    "method": (METHODS_0_28, {}),  # :97
    "model": _STR,  # :94
    "num_speculative_tokens": _POS,  # :91 Field(gt=0); required (:1352); n_predict divisibility (:1073-1081)
    "draft_tensor_parallel_size": _GE1,  # :105 Field(ge=1); 1 or the target's TP (:1286-1293)
    "max_model_len": _GE1,  # :129 Field(ge=1); <= draft's and target's (:1200-1211)
    "enforce_eager": _BOOL,  # :88
    # :142; true refused for draft_model/dflash/dspark (llm_base_proposer.py:219)
    "disable_padded_drafter_batch": _BOOL,
    "prompt_lookup_max": _GE1,  # :160 Field(ge=1)
    "prompt_lookup_min": _GE1,  # :163 Field(ge=1); min <= max (:825-829)
    "parallel_drafting": _BOOL,  # :168; forced True for dflash/dspark (:1046-1047)
    "rejection_sample_method": (("standard",), {}),  # :219, :80; "block" (V2 runner only) and "synthetic" left out
    "draft_sample_method": (("greedy", "probabilistic"), {}),  # :290, :81 (NEW; 0.20.1's "probabilistic" moved here)
}
DRAFT_TP_0_28 = (1,)  # :1261-1294 unchanged
SUFFIX_NEEDS_0_28 = "arctic_inference"  # :1146-1151; utils/import_utils.py:542-545
# :935-957: skipped for eagle/eagle3/dflash/dspark; substring tests in this order (architecture tests not modelled)
REDETECTED_0_28 = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"))
ENGINE_0_28: dict[str, Spec] = {
    "max_model_len": _POS,  # arg_utils.py:863 (model.py:209)
    "max_num_seqs": _GE1,  # arg_utils.py:1520-1526, scheduler.py:63 ge=1
    "max_num_batched_tokens": _GE1,  # arg_utils.py:1506-1512, scheduler.py:49 ge=1
    "enable_prefix_caching": _BOOL,  # arg_utils.py:1217-1223 (cache.py:96)
    "enable_chunked_prefill": _BOOL,  # arg_utils.py:1536-1542 (scheduler.py:74)
    "async_scheduling": _BOOL,  # arg_utils.py:1562-1564 (scheduler.py:148)
    "enforce_eager": _BOOL,  # arg_utils.py:872 (model.py:236)
    "trust_remote_code": _BOOL,  # arg_utils.py:846-848 (model.py:165)
    "kv_cache_dtype": (("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"),
                       {}),  # arg_utils.py:1213, cache.py:19-37; int4_per_token_head, nvfp4_4over6 not modelled
    "dtype": (("auto", "half", "float16", "bfloat16", "float", "float32"), {}),  # arg_utils.py:849, model.py:99
    "max_cudagraph_capture_size": _GE1,  # arg_utils.py:1578-1581 (compilation.py:692)
    "stream_interval": _GE1,  # arg_utils.py:1565-1567, scheduler.py:153 ge=1
    "enable_log_requests": _BOOL,  # arg_utils.py:2864-2872
}
RESERVED_0_28 = {**RESERVED,  # host/port cli_args.py:246/:248, api_key :283, model_tag :373, served_model_name
                 # arg_utils.py:897, gpu_memory_utilization :1208, tensor_parallel_size :1052, download_dir :937
                 "spec_method": "the speculative config is rendered as one --speculative-config "
                                "(arg_utils.py:1618-1623, :1838-1850)",
                 "spec_model": "as spec_method", "spec_tokens": "as spec_method"}
# metrics.py:229-231, Counters (:198) exposed with `_total`; labels loggers.py:468
COUNTERS_0_28 = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total")
# cli/serve.py:14, :155, :168; cli_args.py:366, :413; utils/argparse_utils.py:113; engine/arg_utils.py:2849 (:1707)
VALIDATOR_0_28 = VALIDATOR  # same four module:name strings
# llm_base_proposer.py:219: draft_model, dflash and dspark refuse disable_padded_drafter_batch: true
PADDED_NEEDED_0_28 = ("draft_model", "dflash", "dspark")
CONTRACT_0_28 = Contract(version="0.28.0", image="vllm/vllm-openai:v0.28.0",
                         source="vllm-project/vllm v0.28.0 (2cf0a6915)", methods=METHODS_0_28,
                         needs_model=NEEDS_MODEL_0_28, speculative=SPECULATIVE_0_28, engine=ENGINE_0_28,
                         reserved=RESERVED_0_28, validator=VALIDATOR_0_28, draft_tp=DRAFT_TP_0_28,
                         suffix_needs=SUFFIX_NEEDS_0_28, redetected=REDETECTED_0_28,
                         redetect_skips=("eagle", "eagle3", "dflash", "dspark"), padded_needed=PADDED_NEEDED_0_28)

# vLLM version -> its contract: the versions specfleet can check options for
CONTRACTS: dict[str, Contract] = {c.version: c for c in (CONTRACT, CONTRACT_0_28)}
