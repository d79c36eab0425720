#!/usr/bin/python3
"""trtllm-serve STAND-IN -- this is NOT TensorRT-LLM.

specfleet CI runs on QEMU VMs with no GPU and no NGC image.  This single
file (Python 3 stdlib + PyYAML) pretends to be ``trtllm-serve`` from
TensorRT-LLM 1.2.0rc6 (or the ``version`` of its behaviour config: one of
the versions of tests/contract/trtllm_llm_args.json) closely enough to
exercise the deployment: same command line (``--config`` only where that
version takes it), the same strict YAML checking against the contract
extracted from upstream for that version (tests/contract),
the same mount/cache/environment preconditions, the same start-up order
(port bound, model "loaded" while connections are refused, then serving)
and the same HTTP endpoints.  It generates no real text.

Behaviour, in order (every step is logged to stdout, i.e. the journal):

1. read the behaviour config ``/etc/trtllm-standin.json`` (path overridable
   with ``TRTLLM_STANDIN_CONFIG``; missing -> mode "ok", load_delay_s 5):
   ``{"mode": "ok"|"crash"|"never_healthy"|"empty"|"oom_load"|"oom_request",
   "load_delay_s": float, "version": str}`` plus the SYNTHETIC speculative-decoding
   model below ("oom_load": allocate memory without bound while loading, as a load
   that does not fit a GB10's unified memory would; "oom_request": serve, then
   allocate without bound on a completion whose prompt has more than
   OOM_PROMPT_TOKENS tokens, as a long prefill would (the gate's smoke prompt is
   short); either way the kernel's OOM killer ends the process, which is what the
   tests observe);
2. validate the extra_llm_api_options YAML against the version's extracted
   contract (tests/contract/trtllm_contract.py: unknown keys refused at any
   level, types checked -- stricter than pydantic's lax coercion: a string
   or a bool is never accepted where an int is expected);
3. check the model (HF cache snapshot or local dir), the draft model dir
   for Eagle/DraftTarget, and TIKTOKEN_ENCODINGS_BASE for gpt-oss models;
4. mode "crash": exit 1.  Otherwise bind the port, sleep load_delay_s
   without listen()ing (connections refused), then serve HTTP.

Tensor/pipeline parallel (tp_size x pp_size > 1, a two-Spark pair): one GB10
GPU per rank, so a world bigger than its ranks is refused with llm.py's
"Only N GPUs are available, but W are required." (the stricter reading of
upstream's check, a guess); the ranks come from tllm_mpi_size as
trtllm-llmapi-launch sets it (llmapi_launch.sh, the STAND-IN launcher). After
binding the port, the server waits for rank 0's MPI session (listening once
every rank is up: pylib/tensorrt_llm/llmapi/mpi_session.py) and exits the
moment it closes, so a world missing a rank never serves.

Any error in steps 1-3 prints one clear ERROR line and exits 1 before the
port is ever listened on.  SIGTERM/SIGINT exit (status 0) within a second.

Device memory: once loaded, the server holds an empty memfd named
DEVICE_MEMORY for its life, the STAND-IN for what a GB10's driver allocates
for it (hold_device_memory): a test fills it from outside the container, so
that memory is not charged to the container's cgroup and goes with the
server's process (tests/vm/test_memory_oom.py, case c).

Credentials: trtllm-serve has no use for a client's credentials (it has no
authentication). The stand-in logs the NAMES of the credential-like headers a
request carries (Authorization, api-key, x-api-key, cookies, ...), never their
values, in one CREDENTIALS_SEEN line, so that a test can tell what reached the
server through a gateway (tests/vm/standin_common/standin_credentials.py, the
rule both stand-ins log by).

Extra environment knobs (stand-in only): TRTLLM_STANDIN_CONFIG (config
path), TRTLLM_STANDIN_STRICT_TIKTOKEN=1 (refuse tiktoken files whose
SHA-256 differs from the published one; default: warn only).

Speculative decoding: a SYNTHETIC model (no GPU, no draft model runs)
---------------------------------------------------------------------
The stand-in does not measure anything real: it SLEEPS for a modelled time
so that a benchmark client sees tokens/s, TTFT and inter-token latency that
follow the usual speculative-decoding arithmetic, with parameters taken from
the behaviour config (defaults in DEFAULT_BEHAVIOUR / DEFAULT_SPECULATION;
the numbers are invented, merely plausible for a Spark):

* ``target_step_ms`` (17.0, i.e. ~58 tokens/s without speculation, the
  public gpt-oss-120b-on-Spark figure): one target forward pass;
* ``prefill_ms_per_token`` (0.2): context phase cost per prompt token
  (prompt tokens = whitespace-separated words);
* ``seed`` (0): seeds the per-request RNG (seeded from seed + prompt +
  max_tokens + choice index, so runs are reproducible);
* ``speculation``: per ``decoding_type`` (``Eagle``, also used for
  ``Eagle3``; ``DraftTarget``; ``NGram``; ``MTP``), ``acceptance``: the
  per-position acceptance probabilities p_1, p_2, ... of the draft tokens
  (p_i = P(draft token i accepted | tokens 1..i-1 accepted); positions past
  the list reuse its last value) and ``draft_step_ms``: the cost of
  drafting ONE token.  A config may override any part (merged per type).

The server reads ``speculative_config.decoding_type`` and ``max_draft_len``
(MTP: ``num_nextn_predict_layers``) from the extra_llm_api_options YAML it
validated.  A request then runs as:

  context iteration: cost = target_step_ms + prefill_ms_per_token * prompt
                     tokens; emits 1 token (the first token: TTFT);
  each generation iteration: draft k = max_draft_len tokens, accept the
                     prefix A (draw per position with the probabilities
                     above, stop at the first rejection), emit A + 1 tokens
                     (capped by what is left), cost = target_step_ms +
                     k * draft_step_ms.  Without speculation: emit 1 token,
                     cost = target_step_ms.

So E[A] = sum_i prod_{j<=i} p_j, acceptance length = 1 + E[A], and the
decode speed-up over no speculation is (1 + E[A]) * target_step_ms /
(target_step_ms + k * draft_step_ms).  ``temperature`` does not change the
draws.  Requests produce min(max_tokens, 32) tokens (the stand-in "model"
stops by itself), or exactly max_tokens with ``ignore_eos: true`` (as
TensorRT-LLM's OpenAI server and benchmark clients use it).  ``stream:
true`` sends one SSE chunk per iteration (OpenAI format, ``data: [DONE]``
at the end).  At most ``max_batch_size`` requests run at once (the others
queue); admitted requests iterate independently (no batching cost is
modelled).

``GET /metrics`` returns (and removes: drained on read, as the real
handler) a JSON list of per-iteration stats in TensorRT-LLM's shape
(``iter, iterLatencyMS, numActiveRequests, numQueuedRequests,
numCompletedRequests, gpuMemUsage, timestamp, inflightBatchingStats,
specDecodingStats: {numDraftTokens, numAcceptedTokens,
numRequestsWithDraftTokens, acceptanceLength, iterLatencyMS,
draftOverhead}``), one entry per request iteration, kept only when the YAML
sets ``enable_iter_perf_stats: true`` (at most ``iter_stats_max_iterations``,
default 1000).  ``draftOverhead`` (draft time / iteration time) is non-zero
only for DraftTarget (a two-model drafter), as in TensorRT-LLM.
"""

import argparse
import difflib
import hashlib
import http.server
import json
import math
import os
import random
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections import deque

try:
    import yaml
except ImportError:  # pragma: no cover - the image always has python3-yaml
    yaml = None

try:  # the image ships it in dist-packages (image.py); in the source tree it is tests/contract/
    import trtllm_contract
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "contract"))
    import trtllm_contract

try:  # the same: in the source tree it is tests/vm/standin_common/ (the stand-ins' one rule for credentials)
    import standin_credentials
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "standin_common"))
    import standin_credentials

STANDIN_TAG = "STAND-IN"
DEFAULT_CONFIG_PATH = "/etc/trtllm-standin.json"
DEFAULT_VERSION = "1.2.0rc6"
MODES = ("ok", "crash", "never_healthy", "empty", "oom_load", "oom_request")
OOM_CHUNK = 32 << 20  # bytes written per allocation of the oom_* modes (filled, so the pages are really used)
OOM_PROMPT_TOKENS = 1000  # oom_request: a prompt longer than this (whitespace-separated words) exhausts memory
# SYNTHETIC speculative-decoding model (see the module docstring): invented, plausible numbers.
DEFAULT_SPECULATION = {
    "Eagle": {"acceptance": [0.80, 0.70, 0.60, 0.50, 0.45, 0.40, 0.35, 0.30], "draft_step_ms": 1.5},
    "DraftTarget": {"acceptance": [0.75, 0.65, 0.55, 0.50, 0.45, 0.40, 0.35, 0.30], "draft_step_ms": 4.0},
    "NGram": {"acceptance": [0.50, 0.40, 0.30, 0.25, 0.20], "draft_step_ms": 0.1},
    "MTP": {"acceptance": [0.85, 0.70, 0.55], "draft_step_ms": 1.0},
}
DEFAULT_BEHAVIOUR = {"mode": "ok", "load_delay_s": 5.0, "version": DEFAULT_VERSION,
                     "target_step_ms": 17.0, "prefill_ms_per_token": 0.2, "seed": 0,
                     "speculation": DEFAULT_SPECULATION}

TIKTOKEN_SHA256 = {
    "o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
HARMONY_ERROR = ("openai_harmony.HarmonyError: error downloading or loading vocab file: "
                 "failed to download or load vocab file")


# --------------------------------------------------------------------------
# logging
# --------------------------------------------------------------------------
_LOG_LOCK = threading.Lock()
_LEVELS = {"internal_error": 0, "error": 1, "warning": 2, "info": 3,
           "verbose": 4, "debug": 5, "trace": 6}
_log_threshold = _LEVELS["info"]


def log(msg, level="I"):
    lvl = {"E": 1, "W": 2, "I": 3, "D": 5}.get(level, 3)
    if lvl > _log_threshold and level != "E":
        return
    stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
    with _LOG_LOCK:
        sys.stdout.write(f"[{stamp}] [TRT-LLM {STANDIN_TAG}] [{level}] {msg}\n")
        sys.stdout.flush()


def exhaust_memory(when):
    """The oom_* modes: take memory in filled chunks until the kernel's OOM killer ends this process (never returns)."""
    mode = "load" if when == "while loading" else "request"
    log(f"stand-in mode oom_{mode}: allocating memory without bound {when}, until the kernel's OOM killer ends "
        "this process", "W")
    held = []
    while True:
        held.append(bytearray(b"\x01") * OOM_CHUNK)
        if len(held) % 16 == 0:
            log(f"holding {len(held) * OOM_CHUNK >> 20:d} MiB", "W")


DEVICE_MEMORY = "trtllm-standin-device-memory"  # the memfd's name: /proc/PID/fd/N -> "/memfd:<name> (deleted)"


def hold_device_memory():
    """STAND-IN for the allocations a GB10's driver makes for this process (its CUDA context, weights, KV cache): an
    empty memfd held open for the process's life. It takes no memory here. A test fills it from outside the container
    (tests/vm/unified_memory_standin.py, through pidfd_getfd): those pages are then charged to the filler's cgroup,
    not the container's, as the GPU's are not, and they go when this process does (its files are closed before it is
    a zombie), as the driver frees a dead process's allocations."""
    fd = os.memfd_create(DEVICE_MEMORY, os.MFD_CLOEXEC)
    log(f"device memory (STAND-IN, empty memfd {DEVICE_MEMORY}, fd {fd:d}): held while this process lives")
    return fd


class StartupError(Exception):
    """A precondition failed: print one ERROR line and exit 1."""


def die(msg):
    log(f"ERROR: {msg} -- exiting with status 1 (the port was never listened on)", "E")
    sys.exit(1)


# --------------------------------------------------------------------------
# 1. behaviour config
# --------------------------------------------------------------------------
def read_behaviour(strict=True):
    path = os.environ.get("TRTLLM_STANDIN_CONFIG", DEFAULT_CONFIG_PATH)
    cfg = dict(DEFAULT_BEHAVIOUR)
    if not os.path.exists(path):
        return cfg, path, False
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise ValueError("top level is not a JSON object")
        for key, value in data.items():
            if key not in DEFAULT_BEHAVIOUR:
                continue  # tolerated, logged by the caller
            cfg[key] = value
        if cfg["mode"] not in MODES:
            raise ValueError(f"mode {cfg['mode']!r} not one of {'|'.join(MODES)}")
        if isinstance(cfg["load_delay_s"], bool) or not isinstance(cfg["load_delay_s"], (int, float)) \
                or not math.isfinite(cfg["load_delay_s"]) or cfg["load_delay_s"] < 0:
            raise ValueError("load_delay_s must be a number >= 0")
        cfg["load_delay_s"] = float(cfg["load_delay_s"])
        if not isinstance(cfg["version"], str) or not cfg["version"]:
            raise ValueError("version must be a non-empty string")
        for key in ("target_step_ms", "prefill_ms_per_token"):
            cfg[key] = _nonneg_number(cfg[key], key)
        if isinstance(cfg["seed"], bool) or not isinstance(cfg["seed"], int):
            raise ValueError("seed must be an integer")
        cfg["speculation"] = _speculation(cfg["speculation"])
        cfg["_unknown_keys"] = sorted(set(data) - set(DEFAULT_BEHAVIOUR))
    except (OSError, ValueError) as exc:
        if strict:
            raise StartupError(f"stand-in behaviour config {path} is invalid: {exc}") from exc
        return dict(DEFAULT_BEHAVIOUR), path, False
    return cfg, path, True


def _nonneg_number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a number >= 0, got {value!r}")
    return float(value)


def _speculation(data):
    """DEFAULT_SPECULATION with a config's per-decoding-type overrides merged in (validated)."""
    if not isinstance(data, dict):
        raise ValueError("speculation must be an object {decoding_type: {acceptance, draft_step_ms}}")
    out = {k: dict(v) for k, v in DEFAULT_SPECULATION.items()}
    for dt, params in data.items():
        if not isinstance(params, dict) or set(params) - {"acceptance", "draft_step_ms"}:
            raise ValueError(f"speculation.{dt} must be an object with acceptance and/or draft_step_ms")
        merged = dict(out.get(dt) or {"acceptance": [0.5], "draft_step_ms": 1.0})
        if "acceptance" in params:
            acc = params["acceptance"]
            if not isinstance(acc, list) or not acc or any(
                    isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1 for p in acc):
                raise ValueError(f"speculation.{dt}.acceptance must be a non-empty list of probabilities in [0, 1]")
            merged["acceptance"] = [float(p) for p in acc]
        if "draft_step_ms" in params:
            merged["draft_step_ms"] = _nonneg_number(params["draft_step_ms"], f"speculation.{dt}.draft_step_ms")
        out[dt] = merged
    return out


# --------------------------------------------------------------------------
# 2. extra_llm_api_options schema (strict, pydantic extra="forbid"-like)
# --------------------------------------------------------------------------
_typename = trtllm_contract._typename  # one definition of the YAML type names in messages


def _p(path):
    return path or "<top level>"


def v_bool(v, path, errs):
    if not isinstance(v, bool):
        errs.append(f"{_p(path)}: expected a bool (true/false), got {_typename(v)} {v!r}")


def v_int(minimum=None):
    def check(v, path, errs):
        if isinstance(v, bool) or not isinstance(v, int):
            errs.append(f"{_p(path)}: expected an integer, got {_typename(v)} {v!r}")
        elif minimum is not None and v < minimum:
            errs.append(f"{_p(path)}: must be >= {minimum:d}, got {v:d}")
    return check


def v_float(lo=None, hi=None):
    def check(v, path, errs):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            errs.append(f"{_p(path)}: expected a number, got {_typename(v)} {v!r}")
        elif not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
            errs.append(f"{_p(path)}: must be in [{lo}, {hi}], got {v!r}")
    return check


def v_str(v, path, errs):
    if not isinstance(v, str):
        errs.append(f"{_p(path)}: expected a string, got {_typename(v)} {v!r}")


def v_nonempty_str(v, path, errs):
    if not isinstance(v, str) or not v.strip():
        errs.append(f"{_p(path)}: expected a non-empty string, got {_typename(v)} {v!r}")


def v_enum(*choices):
    def check(v, path, errs):
        if not isinstance(v, str) or v not in choices:
            errs.append(f"{_p(path)}: must be one of {', '.join(choices)}, got {v!r}")
    return check


def v_list(item):
    def check(v, path, errs):
        if not isinstance(v, list):
            errs.append(f"{_p(path)}: expected a list, got {_typename(v)} {v!r}")
            return
        for i, x in enumerate(v):
            item(x, f"{path}[{i:d}]", errs)
    return check


def v_any(v, path, errs):
    pass


def nullable(check):
    def wrapped(v, path, errs):
        if v is not None:
            check(v, path, errs)
    return wrapped


def check_mapping(v, path, fields, errs, model_name):
    """Strict model: v must be a mapping whose keys are all in fields."""
    if not isinstance(v, dict):
        errs.append(f"{_p(path)}: expected a mapping ({model_name}), got {_typename(v)} {v!r}")
        return False
    for key, value in v.items():
        sub = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str):
            errs.append(f"{_p(path)}: keys must be strings, got {_typename(key)} {key!r}")
            continue
        if key not in fields:
            hint = difflib.get_close_matches(key, list(fields), n=1)
            did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
            errs.append(f"{sub}: unknown key, extra inputs are not permitted ({model_name}){did_you_mean}")
            continue
        fields[key](value, sub, errs)
    return True


def v_model(fields, model_name):
    def check(v, path, errs):
        check_mapping(v, path, fields, errs, model_name)
    return check


CUDA_GRAPH_FIELDS = {
    "max_batch_size": v_int(0),
    "batch_sizes": nullable(v_list(v_int(1))),
    "enable_padding": v_bool,
}

KV_CACHE_FIELDS = {
    "free_gpu_memory_fraction": nullable(v_float(0.0, 1.0)),
    "enable_block_reuse": v_bool,
    "max_tokens": nullable(v_int(1)),
    "dtype": v_str,
    "max_attention_window": nullable(v_list(v_int(1))),
    "sink_token_length": nullable(v_int(0)),
    "host_cache_size": nullable(v_int(0)),
    "onboard_blocks": v_bool,
    "cross_kv_cache_fraction": nullable(v_float(0.0, 1.0)),
    "secondary_offload_min_priority": nullable(v_int()),
    "event_buffer_max_size": v_int(0),
    "enable_partial_reuse": v_bool,
    "copy_on_partial_reuse": v_bool,
    "use_uvm": v_bool,
    "mamba_ssm_cache_dtype": v_str,
    "tokens_per_block": v_int(1),
}

MOE_FIELDS = {
    "backend": v_enum("CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON"),
    "max_num_tokens": nullable(v_int(1)),
    "load_balancer": v_any,
}

SCHEDULER_FIELDS = {
    "capacity_scheduler_policy": v_enum("MAX_UTILIZATION", "GUARANTEED_NO_EVICT", "STATIC_BATCH"),
    "context_chunking_policy": nullable(v_enum("FIRST_COME_FIRST_SERVED", "EQUAL_PROGRESS")),
    "dynamic_batch_config": v_any,
}

# speculative_config: fields common to every DecodingBaseConfig ...
SPEC_BASE_FIELDS = {
    "decoding_type": v_str,
    "max_draft_len": nullable(v_int()),
    "speculative_model_dir": nullable(v_str),
    "max_concurrency": nullable(v_int(1)),
    "load_format": nullable(v_str),
}
# ... plus the per-decoding-type fields.
SPEC_TYPE_FIELDS = {
    "Eagle": {
        "eagle_choices": nullable(v_list(v_list(v_int(0)))),
        "greedy_sampling": nullable(v_bool),
        "posterior_threshold": nullable(v_float()),
        "use_dynamic_tree": nullable(v_bool),
        "dynamic_tree_max_topK": nullable(v_int(1)),
        "num_eagle_layers": nullable(v_int(1)),
        "max_non_leaves_per_layer": nullable(v_int(1)),
        "eagle3_one_model": nullable(v_bool),
        "eagle3_layers_to_capture": nullable(v_list(v_int())),
    },
    "DraftTarget": {},
    "NGram": {
        "max_matching_ngram_size": v_int(),
        "is_keep_all": v_bool,
        "is_use_oldest": v_bool,
        "is_public_pool": v_bool,
    },
    "MTP": {
        "num_nextn_predict_layers": v_int(),
        "use_relaxed_acceptance_for_thinking": v_bool,
        "relaxed_topk": v_int(1),
        "relaxed_delta": v_float(),
        "use_mtp_vanilla": v_bool,
        "mtp_eagle_one_model": v_bool,
    },
    "UserProvided": {"drafter": v_any, "resource_manager": v_any},
    "SaveState": {
        "output_directory": v_nonempty_str,
        "write_interval": v_int(1),
        "file_prefix": v_str,
        "eagle3_layers_to_capture": nullable(v_list(v_int())),
    },
    "AUTO": {},
    # TensorRT-engine only (refused on the pytorch / _autodeploy backends):
    "Medusa": {"medusa_choices": nullable(v_list(v_list(v_int(0)))),
               "num_medusa_heads": nullable(v_int(1))},
    "Lookahead": {"max_window_size": v_int(1), "max_ngram_size": v_int(1),
                  "max_verification_set_size": v_int(1)},
}
TRT_ONLY_DECODING = ("Medusa", "Lookahead")


def v_speculative(backend):
    def check(v, path, errs):
        if v is None:
            return
        refusal = _speculative_type_refusal(v, path, backend)
        if refusal:
            errs.append(refusal)
            return
        dt = v["decoding_type"]
        fields = dict(SPEC_BASE_FIELDS)
        fields.update(SPEC_TYPE_FIELDS[dt])
        n_before = len(errs)
        check_mapping(v, path, fields, errs, f"{dt}DecodingConfig")
        if len(errs) == n_before:
            _check_max_draft_len(v, path, dt, errs)
            _check_decoding_type_fields(v, path, dt, errs)
    return check


def _speculative_type_refusal(v, path, backend):
    """Why `v` is not a speculative config of a decoding type `backend` takes (its message), or None."""
    if not isinstance(v, dict):
        return f"{path}: expected a mapping (speculative config) or null, got {_typename(v)} {v!r}"
    accepted = ", ".join(k for k in SPEC_TYPE_FIELDS if k not in TRT_ONLY_DECODING)
    if "decoding_type" not in v:
        return f"{path}.decoding_type: field required (one of {accepted})"
    dt = v["decoding_type"]
    if not isinstance(dt, str) or dt not in SPEC_TYPE_FIELDS:
        hint = ""
        if dt == "Eagle3":
            hint = (" (TensorRT-LLM 1.2.0rc6 does not accept 'Eagle3': use decoding_type: Eagle, which is EAGLE-3 on "
                    "the pytorch backend)")
        return f"{path}.decoding_type: invalid decoding type {dt!r}; accepted: {accepted}{hint}"
    if dt in TRT_ONLY_DECODING and backend != "tensorrt":
        return f"{path}.decoding_type: {dt} is only supported by the TensorRT engine backend, not {backend}"
    return None


def _check_max_draft_len(v, path, dt, errs):
    """max_draft_len of a speculative config whose fields are valid: required and > 0 where the type drafts."""
    mdl = v.get("max_draft_len")
    if dt in ("Eagle", "DraftTarget", "NGram"):
        if mdl is None:
            errs.append(f"{path}.max_draft_len: required for decoding_type {dt} (an integer > 0)")
        elif mdl <= 0:
            errs.append(f"{path}.max_draft_len: must be > 0 for decoding_type {dt}, got {mdl:d}")
    elif mdl is not None and mdl <= 0:
        errs.append(f"{path}.max_draft_len: must be > 0, got {mdl:d}")


def _check_decoding_type_fields(v, path, dt, errs):
    """The fields a decoding type requires (a draft checkpoint, a positive n-gram or layer count)."""
    if dt in ("Eagle", "DraftTarget"):
        smd = v.get("speculative_model_dir")
        if smd is None or (isinstance(smd, str) and not smd.strip()):
            errs.append(f"{path}.speculative_model_dir: required for decoding_type {dt} (path to the draft checkpoint)")
    if dt == "NGram":
        m = v.get("max_matching_ngram_size")
        if m is None:
            errs.append(f"{path}.max_matching_ngram_size: required for decoding_type NGram (an integer > 0)")
        elif m <= 0:
            errs.append(f"{path}.max_matching_ngram_size: must be > 0, got {m:d}")
    if dt == "MTP" and v.get("num_nextn_predict_layers", 1) <= 0:
        errs.append(f"{path}.num_nextn_predict_layers: must be > 0, got {v['num_nextn_predict_layers']:d}")


BACKENDS = ("pytorch", "tensorrt", "_autodeploy")


def top_level_fields(backend):
    fields = {
        # BaseLlmArgs
        "tensor_parallel_size": v_int(1),
        "pipeline_parallel_size": v_int(1),
        "moe_expert_parallel_size": nullable(v_int(1)),
        "moe_tensor_parallel_size": nullable(v_int(1)),
        "enable_attention_dp": v_bool,
        "trust_remote_code": v_bool,
        "skip_tokenizer_init": v_bool,
        "tokenizer": nullable(v_str),
        "tokenizer_mode": v_enum("auto", "slow"),
        "revision": nullable(v_str),
        "dtype": v_str,
        "backend": nullable(v_enum(*BACKENDS)),
        "max_batch_size": nullable(v_int(1)),
        "max_num_tokens": nullable(v_int(1)),
        "max_seq_len": nullable(v_int(1)),
        "max_input_len": nullable(v_int(1)),
        "max_beam_width": nullable(v_int(1)),
        "enable_chunked_prefill": v_bool,
        "enable_lora": v_bool,
        "gather_generation_logits": v_bool,
        "guided_decoding_backend": nullable(v_enum("xgrammar", "llguidance")),
        "iter_stats_max_iterations": nullable(v_int(0)),
        "request_stats_max_iterations": nullable(v_int(0)),
        "num_postprocess_workers": v_int(0),
        "reasoning_parser": nullable(v_str),
        "return_perf_metrics": v_bool,
        "kv_cache_config": v_model(KV_CACHE_FIELDS, "KvCacheConfig"),
        "scheduler_config": v_model(SCHEDULER_FIELDS, "SchedulerConfig"),
        "speculative_config": v_speculative(backend),
    }
    if backend != "tensorrt":
        # TorchLlmArgs-only fields (TrtLlmArgs would refuse them as extra inputs).
        fields.update({
            "disable_overlap_scheduler": v_bool,
            "enable_autotuner": v_bool,
            "print_iter_log": v_bool,
            "enable_iter_perf_stats": v_bool,
            "enable_iter_req_stats": v_bool,
            "cuda_graph_config": nullable(v_model(CUDA_GRAPH_FIELDS, "CudaGraphConfig")),
            "moe_config": v_model(MOE_FIELDS, "MoeConfig"),
            "attn_backend": v_enum("TRTLLM", "FLASHINFER", "FLASHINFER_STAR_ATTENTION", "VANILLA"),
            "sampler_type": v_enum("TRTLLMSampler", "TorchSampler", "auto"),
            "stream_interval": v_int(1),
            "garbage_collection_gen0_threshold": v_int(0),
            "enable_layerwise_nvtx_marker": v_bool,
            "enable_min_latency": v_bool,
        })
    return fields


def validate_extra_options(data, cli_backend="pytorch", version=None):
    """Return a list of error strings (empty = valid) for a parsed YAML document. The pytorch backend (what
    specfleet serves) is checked against the extracted upstream contract of the stand-in's version
    (tests/contract/trtllm_llm_args.json); the other backends keep the stand-in's own older table below."""
    if not isinstance(data, dict):
        return [f"<top level>: the extra_llm_api_options YAML must be a mapping, got {_typename(data)}"]
    backend = data.get("backend", cli_backend)
    backend = cli_backend if backend is None else backend
    if backend not in BACKENDS:
        return [f"backend: must be one of {', '.join(BACKENDS)}, got {backend!r}"]
    if backend == "pytorch":
        return trtllm_contract.errors({k: v for k, v in data.items() if k != "backend"}, contract_version(version))
    errs = []
    backend = data.get("backend", cli_backend)
    if backend is None:
        backend = cli_backend
    if backend not in BACKENDS:
        backend = cli_backend  # reported by the field check below
    model = "TrtLlmArgs" if backend == "tensorrt" else "TorchLlmArgs"
    check_mapping(data, "", top_level_fields(backend), errs, model)
    return errs


def contract_version(version=None):
    """The version whose contract the stand-in enforces: its behaviour config's, which the table must have."""
    version = version or read_behaviour(strict=False)[0]["version"]
    if version not in trtllm_contract.versions():
        raise StartupError(f"stand-in version {version} is not in the contract table "
                           f"({', '.join(trtllm_contract.versions())})")
    return version


def load_extra_options(path, cli_backend, version=None):
    if yaml is None:
        raise StartupError("PyYAML is not installed in the stand-in image")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise StartupError(f"cannot read --extra_llm_api_options {path}: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        one_line = str(exc).replace("\n", " ")
        raise StartupError(f"--extra_llm_api_options {path} is not valid YAML: {one_line}") from exc
    errs = validate_extra_options(data, cli_backend, version)
    if errs:
        plural = "" if len(errs) == 1 else "s"
        raise StartupError(f"invalid --extra_llm_api_options {path}: {len(errs):d} validation error{plural}: "
                           f"{'; '.join(errs)}")
    return data


def effective_settings(args, extra):
    """CLI values first, then the YAML overrides them (like serve.py)."""
    eff = {
        "backend": args.backend,
        "max_batch_size": args.max_batch_size,
        "max_num_tokens": args.max_num_tokens,
        "max_seq_len": args.max_seq_len,
        "tensor_parallel_size": args.tp_size,
        "pipeline_parallel_size": args.pp_size,
        "trust_remote_code": args.trust_remote_code,
        "revision": args.revision,
        "kv_cache_config": {"free_gpu_memory_fraction": args.kv_cache_free_gpu_memory_fraction},
    }
    for key, value in extra.items():
        if key == "backend" and value is None:
            continue
        eff[key] = value
    # In this build a YAML kv_cache_config block REPLACES the CLI one: an
    # omitted fraction falls back to the default 0.9, not to the CLI value.
    kv = dict(eff.get("kv_cache_config") or {})
    if kv.get("free_gpu_memory_fraction") is None:
        kv["free_gpu_memory_fraction"] = 0.9
    eff["kv_cache_config"] = kv
    return eff


# --------------------------------------------------------------------------
# 3. mounts: model, draft model, tiktoken
# --------------------------------------------------------------------------
HF_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def hf_hub_cache():
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "huggingface", "hub")


def hf_offline():
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def is_local_path(model):
    return model.startswith(("/", "./", "../", "~")) or model in (".", "..") or os.path.isdir(model)


def check_snapshot(snap, what):
    """Return a list of problems with a model directory (empty = ok)."""
    problems = []
    if not os.path.isdir(snap):
        return [f"{what}: directory {snap} does not exist"]
    if not os.path.isfile(os.path.join(snap, "config.json")):
        problems.append(f"{what}: {snap} has no config.json")
    index = os.path.join(snap, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as fh:
                weight_map = json.load(fh)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return problems + [f"{what}: cannot parse {index}: {exc}"]
        missing = [s for s in shards if not os.path.isfile(os.path.join(snap, s))]
        if missing:
            named = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
            problems.append(f"{what}: {len(missing):d} of {len(shards):d} weight files named by "
                            f"model.safetensors.index.json are missing (or dangling symlinks) in {snap}: {named}")
    elif not any(n.endswith(".safetensors") and os.path.isfile(os.path.join(snap, n))
                 for n in os.listdir(snap)):
        problems.append(f"{what}: no *.safetensors weight file in {snap}")
    return problems


def resolve_hf_model(repo_id, revision, what):
    """Resolve an HF repo id in the hub cache. Returns (snapshot_dir, problems)."""
    hub = hf_hub_cache()
    repo_dir = os.path.join(hub, "models--" + repo_id.replace("/", "--"))
    rev = revision or "main"
    if re.fullmatch(r"[0-9a-f]{40}", rev):
        commit = rev
    else:
        ref = os.path.join(repo_dir, "refs", rev)
        try:
            with open(ref, encoding="utf-8") as fh:
                commit = fh.read().strip()
        except OSError:
            return None, [f"{what}: {repo_id} (revision {rev}) is not in the Hugging Face cache {hub} (no {ref})"]
        if not commit:
            return None, [f"{what}: {ref} is empty"]
    snap = os.path.join(repo_dir, "snapshots", commit)
    if not os.path.isdir(snap):
        return None, [f"{what}: {repo_id} refs/{rev} -> {commit} but snapshot {snap} does not exist"]
    return snap, check_snapshot(snap, what)


def offline_or_download_error(repo_id, problems):
    detail = "; ".join(problems)
    if hf_offline():
        return f"{detail}; HF_HUB_OFFLINE=1 so the server uses only the local cache and cannot fetch it"
    return (f"{detail}; HF_HUB_OFFLINE is not 1, so the real server would now try to download {repo_id} from "
            "huggingface.co -- the stand-in has no network and refuses instead")


def check_model(model, revision):
    """Return (served_model_id, model_path) or raise StartupError."""
    if is_local_path(model):
        path = os.path.abspath(os.path.expanduser(model))
        if not os.path.isdir(path):
            raise StartupError(f"MODEL {model}: local checkpoint directory does not exist")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise StartupError(f"MODEL {model}: local checkpoint directory has no config.json")
        if not any(n.endswith((".safetensors", ".engine", ".bin")) for n in os.listdir(path)):
            log(f"WARNING: local checkpoint {path} holds no *.safetensors / *.engine files", "W")
        log(f"model: local checkpoint directory {path}")
        return os.path.basename(path.rstrip("/")) or path, path
    if not HF_ID_RE.match(model):
        raise StartupError(f"MODEL {model!r} is neither an existing local directory nor a valid Hugging Face repo id")
    snap, problems = resolve_hf_model(model, revision, "MODEL " + model)
    if problems:
        raise StartupError(offline_or_download_error(model, problems))
    log(f"model: {model} resolved in the HF cache -> {snap}")
    return model, snap


def check_draft(spec):
    if not spec:
        return None
    dt = spec.get("decoding_type")
    if dt not in ("Eagle", "Eagle3", "DraftTarget", "Draft_Target"):
        return None
    key = next((k for k in trtllm_contract.draft_keys(contract_version()) if spec.get(k)), None)
    if key is None:
        raise StartupError(f"speculative_config: no draft checkpoint dir for decoding_type {dt}")
    smd = spec[key]
    what = "speculative_config." + key
    if os.path.isdir(smd) or smd.startswith(("/", ".", "~")) or not HF_ID_RE.match(smd):
        path = os.path.abspath(os.path.expanduser(smd))
        if not os.path.isdir(path):
            raise StartupError(f"{what} {smd} (draft model for {dt}): directory does not exist "
                               "(is it mounted into the container?)")
        if not os.path.isfile(os.path.join(path, "config.json")):
            raise StartupError(f"{what} {smd} (draft model for {dt}): no config.json in it")
        log(f"draft model ({dt}): local directory {path}")
        return path
    snap, problems = resolve_hf_model(smd, None, what + " " + smd)
    if problems:
        raise StartupError(offline_or_download_error(smd, problems))
    log(f"draft model ({dt}): {smd} resolved in the HF cache -> {snap}")
    return snap


def is_gpt_oss(model):
    return "gpt-oss" in model.lower()


def tiktoken_problem(verify_hash=False):
    """None if TIKTOKEN_ENCODINGS_BASE holds both encodings, else a message."""
    base = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if not base:
        return "TIKTOKEN_ENCODINGS_BASE is not set (the Harmony adapter would try to download o200k_base)"
    missing = [n for n in TIKTOKEN_SHA256 if not os.path.isfile(os.path.join(base, n))]
    if missing:
        return f"TIKTOKEN_ENCODINGS_BASE={base} lacks {', '.join(missing)}"
    if verify_hash:
        for name, want in TIKTOKEN_SHA256.items():
            h = hashlib.sha256()
            with open(os.path.join(base, name), "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            if h.hexdigest() != want:
                msg = f"{base}/{name} has SHA-256 {h.hexdigest()}, expected {want}"
                if os.environ.get("TRTLLM_STANDIN_STRICT_TIKTOKEN") == "1":
                    return msg
                log(f"WARNING: {msg} (the real Harmony loader would reject it; "
                    "set TRTLLM_STANDIN_STRICT_TIKTOKEN=1 to make the stand-in refuse too)", "W")
    return None


# --------------------------------------------------------------------------
# 4. HTTP serving
# --------------------------------------------------------------------------
FILLER = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
          "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
          "whiskey", "xray", "yankee", "zulu"]
NATURAL_TOKENS = 32  # the stand-in "model" stops by itself after this many tokens


# --------------------------------------------------------------------------
# the MPI world: tp_size x pp_size ranks, one GB10 GPU each
# --------------------------------------------------------------------------
GPUS_PER_NODE = 1  # a DGX Spark (GB10) has one GPU


def mpi_ranks():
    """The ranks the LLM API sees, as upstream's get_mpi_world_size() (tensorrt_llm/llmapi/utils.py): tllm_mpi_size
    under trtllm-llmapi-launch (which starts trtllm-serve without the MPI environment), else this process's MPI world,
    1 without mpirun."""
    if os.environ.get("TLLM_SPAWN_PROXY_PROCESS") == "1":
        return int(os.environ.get("tllm_mpi_size") or 1)  # noqa: SIM112 -- upstream's name, lower case
    return int(os.environ.get("OMPI_COMM_WORLD_SIZE") or 1)


def check_world(world):
    """A world bigger than its GPUs is refused with llm.py's message (the node's GPU count, the world's size).
    Upstream compares the node's GPUs with the world's share per node, and what it does with too few ranks is not
    read here; the stand-in takes the stricter reading, one GPU per rank, so `--tp_size 2` with one rank is refused
    before anything loads (a guess, labelled)."""
    if world > mpi_ranks() * GPUS_PER_NODE:
        raise StartupError(f"RuntimeError: Only {GPUS_PER_NODE:d} GPUs are available, but {world:d} are required.")


def join_mpi_world(world):
    """Under trtllm-llmapi-launch: wait for rank 0's MPI session (it listens once every rank is up), check its size,
    and exit the process the moment it closes (a rank died and mpirun ended the job): a half world never serves.
    None when stopped while waiting."""
    try:
        from tensorrt_llm.llmapi import mpi_session
    except ImportError:  # in the source tree: the STAND-IN package beside this script
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pylib"))
        from tensorrt_llm.llmapi import mpi_session
    addr = os.environ.get("TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR")
    if os.environ.get("TLLM_SPAWN_PROXY_PROCESS") != "1" or not addr:
        raise StartupError(f"tp_size x pp_size = {world:d} needs the MPI session of trtllm-llmapi-launch (run as "
                           f"`mpirun -np {world:d} ... trtllm-llmapi-launch trtllm-serve ...`)")
    log(f"waiting for the MPI world of {world:d} ranks at {addr}")
    waited = 0.0
    while True:
        try:
            session = mpi_session.RemoteMpiCommSessionClient()
            break
        except mpi_session.SessionRefused as exc:
            raise StartupError(str(exc)) from exc
        except OSError:
            if wait_or_stop(0.5):
                return None
            waited += 0.5
            if waited % 10 == 0:
                log(f"still waiting for the MPI world ({waited:.0f} s)")
    if session.world["world_size"] != world:  # the stand-in's own refusal (MpiCommSession's words): a guess
        raise StartupError("ValueError: n_workers must be equal to the number of processes in MPI, "
                           f"got {world:d} vs {session.world['world_size']:d}")
    log(f"MPI world: {world:d} ranks on {', '.join(session.world['hosts'])}")

    def watch():
        session.closed()
        log(f"ERROR: the MPI session at {addr} closed: a rank of the world is gone; exiting", "E")
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    return session


class ServerState:
    def __init__(self, behaviour, served_id, model_arg, eff, gpt_oss):
        self.behaviour = behaviour
        self.served_id = served_id
        self.model_arg = model_arg
        self.eff = eff
        self.gpt_oss = gpt_oss
        self.created = int(time.time())
        self.lock = threading.Lock()
        self.iteration = 0
        self.active = 0
        self.queued = 0
        self.completed = 0
        maxlen = eff.get("iter_stats_max_iterations")
        self.stats = deque(maxlen=maxlen if isinstance(maxlen, int) and maxlen > 0 else 1000)
        slots = eff.get("max_batch_size")
        self.slots = threading.BoundedSemaphore(slots if isinstance(slots, int) and slots > 0 else 2048)
        spec = eff.get("speculative_config") or None
        # 1.3 names: Draft_Target is DraftTarget, Eagle3 runs as Eagle (the synthetic model's table keys)
        self.spec_type = {"Draft_Target": "DraftTarget"}.get(spec.get("decoding_type"), spec.get("decoding_type")) \
            if spec else None
        if spec and self.spec_type == "MTP":
            self.draft_len = spec.get("num_nextn_predict_layers", 1)
        elif spec:
            self.draft_len = spec.get("max_draft_len") or 1
        else:
            self.draft_len = 0
        table = behaviour.get("speculation") or DEFAULT_SPECULATION
        params = table.get(self.spec_type) or (table.get("Eagle") if self.spec_type == "Eagle3" else None) \
            or {"acceptance": [0.5], "draft_step_ms": 1.0}
        self.acceptance = list(params["acceptance"]) if self.draft_len else []
        self.draft_step_ms = float(params["draft_step_ms"]) if self.draft_len else 0.0
        self.target_step_ms = float(behaviour.get("target_step_ms", 0.0))
        self.prefill_ms_per_token = float(behaviour.get("prefill_ms_per_token", 0.0))

    def describe(self):
        if not self.draft_len:
            return (f"no speculation: target_step_ms={self.target_step_ms} "
                    f"prefill_ms_per_token={self.prefill_ms_per_token}")
        expected = expected_acceptance_length(self.acceptance, self.draft_len)
        return (f"SYNTHETIC {self.spec_type} speculation: k={self.draft_len:d} acceptance={self.acceptance} "
                f"draft_step_ms={self.draft_step_ms} target_step_ms={self.target_step_ms} "
                f"prefill_ms_per_token={self.prefill_ms_per_token} expected acceptance length {expected:.3f}")

    def p_accept(self, position):
        """Acceptance probability of draft position `position` (0-based); the last value repeats."""
        return self.acceptance[min(position, len(self.acceptance) - 1)]

    def record_iteration(self, latency_ms, ctx_tokens, draft, accepted, with_draft):
        if not self.eff.get("enable_iter_perf_stats"):
            return
        with self.lock:
            self.iteration += 1
            entry = {
                "iter": self.iteration,
                "iterLatencyMS": round(latency_ms, 3),
                "numActiveRequests": self.active,
                "numQueuedRequests": self.queued,
                "numCompletedRequests": self.completed,
                "maxNumActiveRequests": self.eff.get("max_batch_size") or 2048,
                "gpuMemUsage": 0,
                "cpuMemUsage": 0,
                "pinnedMemUsage": 0,
                "timestamp": time.strftime("%m-%d-%Y %H:%M:%S"),
                "inflightBatchingStats": {
                    "numContextRequests": 1 if ctx_tokens else 0,
                    "numGenRequests": 0 if ctx_tokens else 1,
                    "numScheduledRequests": 1,
                    "numCtxTokens": ctx_tokens,
                    "numPausedRequests": 0,
                    "microBatchId": 0,
                    "avgNumDecodedTokensPerIter": float(accepted + 1),
                },
                "standin": True,
            }
            if self.draft_len:
                draft_ms = draft * self.draft_step_ms
                entry["specDecodingStats"] = {
                    "numDraftTokens": draft,
                    "numAcceptedTokens": accepted,
                    "numRequestsWithDraftTokens": with_draft,
                    "acceptanceLength": float(accepted + with_draft) / with_draft if with_draft else 1.0,
                    "iterLatencyMS": round(latency_ms, 3),
                    "draftOverhead": round(draft_ms / latency_ms, 6)
                    if self.spec_type == "DraftTarget" and latency_ms > 0 else 0.0,
                }
            self.stats.append(entry)

    def drain(self):
        with self.lock:
            out = list(self.stats)
            self.stats.clear()
        return out


def expected_acceptance_length(acceptance, k):
    """1 + E[accepted draft tokens] for k drafts with per-position acceptance probabilities."""
    total, survive = 1.0, 1.0
    for i in range(k):
        survive *= acceptance[min(i, len(acceptance) - 1)]
        total += survive
    return total


def count_prompt_tokens(prompt):
    if isinstance(prompt, str):
        return max(len(prompt.split()), 1)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt)
    return 1


def _plan_text(state, prompt_text, max_tokens, ignore_eos):
    """(header, words, finish_reason): the deterministic stand-in output, before it is paced."""
    n = max_tokens if ignore_eos else min(max_tokens, NATURAL_TOKENS)
    finish = "length" if n == max_tokens else "stop"
    digest = hashlib.sha256(prompt_text.encode("utf-8", "replace")).digest()
    words = [FILLER[(digest[i % len(digest)] + i) % len(FILLER)] for i in range(n)]
    header = (f" [trtllm-serve STAND-IN {state.behaviour['version']}, not TensorRT-LLM; model {state.served_id}; "
              f"max_tokens={max_tokens:d} honoured; {n:d} tokens] ")
    return header, words, finish


def simulate(state, prompt_text, prompt_tokens, max_tokens, ignore_eos=False, choice=0):
    """Generator: paces one request through the SYNTHETIC speculative-decoding model (module docstring).

    Yields one text piece per iteration (after sleeping the iteration's modelled cost); the pieces
    joined are the deterministic output text. Finally returns (completion_tokens, finish_reason)."""
    if state.behaviour["mode"] == "empty":
        return 0, "stop"
    if state.behaviour["mode"] == "oom_request" and prompt_tokens > OOM_PROMPT_TOKENS:
        exhaust_memory(f"on a request (a {prompt_tokens:d}-token prompt)")
    header, words, finish = _plan_text(state, prompt_text, max_tokens, ignore_eos)
    rng = random.Random(f"{state.behaviour.get('seed', 0)}|{prompt_text}|{max_tokens:d}|{choice:d}")
    with state.lock:
        state.queued += 1
    state.slots.acquire()
    with state.lock:
        state.queued -= 1
        state.active += 1
    try:
        clock = time.monotonic()
        done = 0
        k = state.draft_len
        first = True
        while done < len(words):
            if first:
                cost = state.target_step_ms + state.prefill_ms_per_token * prompt_tokens
                emit, drafted, accepted, with_draft, ctx = 1, 0, 0, 0, prompt_tokens
            else:
                accepted = 0
                while accepted < k and rng.random() < state.p_accept(accepted):
                    accepted += 1
                drafted, with_draft, ctx = k, 1 if k else 0, 0
                emit = min(accepted + 1, len(words) - done)
                cost = state.target_step_ms + k * state.draft_step_ms
            clock += cost / 1000.0
            left = clock - time.monotonic()
            if left > 0:
                time.sleep(left)
            state.record_iteration(cost, ctx, drafted, accepted, with_draft)
            piece = " ".join(words[done:done + emit])
            yield (header + piece) if first else (" " + piece)
            done += emit
            first = False
        return len(words), finish
    finally:
        with state.lock:
            state.active -= 1
            state.completed += 1
        state.slots.release()


def generate(state, prompt_text, max_tokens, prompt_tokens=1, ignore_eos=False, choice=0):
    """Run a request to the end (paced). Returns (text, completion_tokens, finish_reason)."""
    gen = simulate(state, prompt_text, prompt_tokens, max_tokens, ignore_eos, choice)
    pieces = []
    while True:
        try:
            pieces.append(next(gen))
        except StopIteration as stop:
            ctok, finish = stop.value
            return "".join(pieces), ctok, finish


class BadRequest(Exception):
    pass


def _opt_int(body, key, default, minimum):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"'{key}' must be an integer, got {v!r}")
    if v < minimum:
        raise BadRequest(f"'{key}' must be >= {minimum:d}, got {v:d}")
    return v


def _opt_bool(body, key):
    v = body.get(key, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise BadRequest(f"'{key}' must be a boolean, got {v!r}")
    return v


def _check_sampling(body):
    t = body.get("temperature")
    if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
        raise BadRequest(f"'temperature' must be a number >= 0, got {t!r}")
    p = body.get("top_p")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1):
        raise BadRequest(f"'top_p' must be in (0, 1], got {p!r}")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "trtllm-serve-STAND-IN"
    state = None  # set on the subclass

    # one uvicorn-like line per request
    def log_request(self, code="-", size="-"):
        code = getattr(code, "value", code)
        log(f'{self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {code}')

    def log_message(self, fmt, *args):
        log("http: " + (fmt % args), "D")

    def parse_request(self):
        ok = http.server.BaseHTTPRequestHandler.parse_request(self)
        line = standin_credentials.credentials_line(self.headers, self.command, self.path) if ok else None
        if line:
            log(line, "W")
        return ok

    def _send(self, status, payload, content_type="application/json"):
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status, message, etype="BadRequestError"):
        self._send(status, {"object": "error", "message": message, "type": etype,
                            "param": None, "code": status})

    def do_GET(self):
        st = self.state
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if st.behaviour["mode"] == "never_healthy":
                self._send(503, b"", "text/plain")
            else:
                self._send(200, b"", "text/plain")
        elif path == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": st.served_id, "object": "model", "created": st.created, "owned_by": "tensorrt_llm"}]})
        elif path == "/version":
            self._send(200, {"version": f"{st.behaviour['version']}-standin"})
        elif path == "/metrics":
            self._send(200, st.drain())
        elif path in ("/v1/completions", "/v1/chat/completions"):
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    def _read_body(self):
        """Always consume the request body (keeps keep-alive connections in sync)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
            self.close_connection = True
        return self.rfile.read(length) if length > 0 else b""

    def _read_json(self, raw):
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadRequest(f"request body is not valid JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    def _check_model(self, body):
        st = self.state
        m = body.get("model")
        if m is not None and m not in (st.served_id, st.model_arg):
            raise BadRequest(f"The model `{m}` does not exist. This server serves `{st.served_id}`.")

    def do_POST(self):
        raw = self._read_body()
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/completions", "/v1/chat/completions"):
            if path in ("/health", "/v1/models", "/version", "/metrics"):
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})
            return
        try:
            body = self._read_json(raw)
            self._check_model(body)
            _check_sampling(body)
            if path == "/v1/completions":
                self._completions(body)
            else:
                self._chat(body)
        except BadRequest as exc:
            self._error(400, str(exc))

    def _stream_start(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, chunk):
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()

    def _stream_end(self):
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def _completions(self, body):
        st = self.state
        if "prompt" not in body:
            raise BadRequest("'prompt' is required")
        prompt = body["prompt"]
        if isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                       and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)):
            prompts = [prompt]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            prompts = prompt
        else:
            raise BadRequest("'prompt' must be a string, a list of strings or a list of token ids")
        max_tokens = _opt_int(body, "max_tokens", 16, 1)
        n = _opt_int(body, "n", 1, 1)
        ignore_eos = _opt_bool(body, "ignore_eos")
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        jobs = [(p, count_prompt_tokens(p), i) for p in prompts for i in range(n)]
        ptoks = sum(count_prompt_tokens(p) for p in prompts)
        if body.get("stream"):
            self._stream_start()
            base = {"id": rid, "object": "text_completion", "created": created, "model": st.served_id}
            ctoks = 0
            for index, (p, ptok, i) in enumerate(jobs):
                gen = simulate(st, json.dumps(p), ptok, max_tokens, ignore_eos, i)
                while True:
                    try:
                        piece = next(gen)
                    except StopIteration as stop:
                        ctok, finish = stop.value
                        break
                    self._event(dict(base, choices=[{"index": index, "text": piece, "finish_reason": None,
                                                     "logprobs": None, "stop_reason": None}], usage=None))
                ctoks += ctok
                self._event(dict(base, choices=[{"index": index, "text": "", "finish_reason": finish,
                                                 "logprobs": None, "stop_reason": None}],
                                 usage={"prompt_tokens": ptoks, "completion_tokens": ctoks,
                                        "total_tokens": ptoks + ctoks}))
            self._stream_end()
            return
        choices, ctoks = [], 0
        for p, ptok, i in jobs:
            text, ctok, finish = generate(st, json.dumps(p), max_tokens, ptok, ignore_eos, i)
            ctoks += ctok
            choices.append({"index": len(choices), "text": text, "finish_reason": finish,
                            "logprobs": None, "stop_reason": None})
        resp = {"id": rid, "object": "text_completion", "created": created,
                "model": st.served_id, "choices": choices,
                "usage": {"prompt_tokens": ptoks, "completion_tokens": ctoks, "total_tokens": ptoks + ctoks}}
        self._send(200, resp)

    def _chat(self, body):
        st = self.state
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("'messages' must be a non-empty list")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
                raise BadRequest(f"messages[{i:d}] must be an object with 'role' and 'content'")
        if st.gpt_oss:
            problem = tiktoken_problem()
            if problem:
                raise BadRequest(f"{HARMONY_ERROR} ({problem})")
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = _opt_int({"max_tokens": max_tokens}, "max_tokens", 256, 1)
        ignore_eos = _opt_bool(body, "ignore_eos")
        ptok = sum(count_prompt_tokens(m.get("content") if isinstance(m.get("content"), str) else "x")
                   for m in msgs)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.get("stream"):
            base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": st.served_id}
            self._stream_start()
            self._event(dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                             "finish_reason": None}], usage=None))
            gen = simulate(st, json.dumps(msgs), ptok, max_tokens, ignore_eos)
            while True:
                try:
                    piece = next(gen)
                except StopIteration as stop:
                    ctok, finish = stop.value
                    break
                self._event(dict(base, choices=[{"index": 0, "delta": {"content": piece},
                                                 "finish_reason": None}], usage=None))
            self._event(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}],
                             usage={"prompt_tokens": ptok, "completion_tokens": ctok,
                                    "total_tokens": ptok + ctok}))
            self._stream_end()
            return
        text, ctok, finish = generate(st, json.dumps(msgs), max_tokens, ptok, ignore_eos)
        resp = {"id": rid, "object": "chat.completion", "created": created, "model": st.served_id,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                                     "reasoning_content": None, "tool_calls": []},
                             "logprobs": None, "finish_reason": finish, "stop_reason": None}],
                "usage": {"prompt_tokens": ptok, "completion_tokens": ctok, "total_tokens": ptok + ctok}}
        self._send(200, resp)

    do_HEAD = do_GET


class StandinHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(host, port):
    """Create and bind (NOT listen) the server socket -- like the real start-up order.

    Like uvicorn: IPv6 only when the host contains ':', else IPv4 ("localhost" -> 127.0.0.1).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot resolve --host {host}: {exc}") from exc
    sockaddr = infos[0][4]

    class Server(StandinHTTPServer):
        address_family = family

    srv = Server(sockaddr, Handler, bind_and_activate=False)
    try:
        srv.server_bind()
    except OSError as exc:
        srv.server_close()
        raise StartupError(f"cannot bind {host}:{port}: {exc} (is port {port} already in use?)") from exc
    return srv


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------
class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        cfg, _, _ = read_behaviour(strict=False)
        version = cfg["version"]
        print(f"trtllm-serve, version {version}-standin (STAND-IN for TensorRT-LLM {version}, NOT TensorRT-LLM)")
        parser.exit(0)


def build_parser():
    p = argparse.ArgumentParser(
        prog="trtllm-serve",
        allow_abbrev=False,
        description="STAND-IN for TensorRT-LLM's trtllm-serve (specfleet CI; NOT TensorRT-LLM, no GPU, "
                    "no real model). Validates the same CLI, extra_llm_api_options YAML and mounts, then "
                    "serves OpenAI-shaped fake completions on the same endpoints.")
    p.add_argument("model", metavar="MODEL", help="Hugging Face repo id or local checkpoint directory")
    p.add_argument("--tokenizer", default=None, help="(accepted, ignored by the stand-in)")
    p.add_argument("--host", default="localhost")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--backend", choices=BACKENDS, default="pytorch")
    p.add_argument("--log_level", default="info", choices=list(_LEVELS))
    p.add_argument("--max_beam_width", type=int, default=1)
    p.add_argument("--max_batch_size", type=int, default=2048)
    p.add_argument("--max_num_tokens", type=int, default=8192)
    p.add_argument("--max_seq_len", type=int, default=None)
    p.add_argument("--tp_size", type=int, default=1)
    p.add_argument("--pp_size", type=int, default=1)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", type=float, default=0.9)
    p.add_argument("--extra_llm_api_options", "--config", dest="extra_llm_api_options", default=None, metavar="PATH")
    p.add_argument("--trust_remote_code", action="store_true")
    p.add_argument("--revision", default=None)
    p.add_argument("--version", action=VersionAction, help="show the (stand-in) version and exit")
    return p


def parse_args(argv):
    if argv and argv[0] == "serve":  # `trtllm-serve serve MODEL ...` is the same command
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    args.yaml_flags = [f for f in ("--config", "--extra_llm_api_options")
                       if any(a == f or a.startswith(f + "=") for a in argv)]
    bad = [(n, getattr(args, n)) for n in ("max_batch_size", "max_num_tokens", "tp_size", "pp_size",
                                          "max_beam_width")
           if getattr(args, n) < 1]
    if args.max_seq_len is not None and args.max_seq_len < 1:
        bad.append(("max_seq_len", args.max_seq_len))
    if bad:
        build_parser().error("; ".join(f"--{name} must be >= 1, got {value:d}" for name, value in bad))
    if not 0 <= args.port <= 65535:
        build_parser().error("--port must be in 0..65535")
    return args


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
# Set by the signal handler.  The handler must not take any lock (log(),
# threading.Event) because it runs in the main thread, which may hold it.
_stop_signal = []


def _on_signal(signum, frame):
    _stop_signal.append(signum)


def wait_or_stop(seconds):
    """Sleep up to `seconds` in short slices; True as soon as a stop signal arrived."""
    deadline = time.monotonic() + seconds
    while True:
        if _stop_signal:
            log(f"received {signal.Signals(_stop_signal[0]).name}, shutting down")
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, 0.05))


def main(argv=None):
    global _log_threshold
    args = parse_args(sys.argv[1:] if argv is None else argv)
    _log_threshold = _LEVELS[args.log_level]

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    try:
        behaviour = _read_behaviour_step(args, argv)
        eff = _options_step(args, behaviour)
        served_id, gpt_oss = _mounts_step(args, eff)
        srv = _bind_step(args, behaviour, eff)
        if srv is None:
            return 0
    except StartupError as exc:
        die(str(exc))
    return _load_and_serve(srv, args, behaviour, eff, served_id, gpt_oss)


def _read_behaviour_step(args, argv):
    """Step 1: the behaviour config, logged; the YAML flag must be one the version's serve takes."""
    behaviour, cfg_path, found = read_behaviour()
    log(f"trtllm-serve STAND-IN {behaviour['version']}-standin starting -- this is NOT TensorRT-LLM (specfleet CI "
        "stand-in, no GPU, fake outputs)")
    log(f"argv: {' '.join(sys.argv if argv is None else ['trtllm-serve'] + list(argv))}")
    log(f"step 1/4: behaviour config {cfg_path} {'read' if found else 'absent (defaults)'}: "
        f"mode={behaviour['mode']} load_delay_s={behaviour['load_delay_s']} version={behaviour['version']}")
    for k in behaviour.pop("_unknown_keys", []):
        log(f"WARNING: ignoring unknown key {k!r} in {cfg_path}", "W")
    flags = trtllm_contract.serve_flags(contract_version(behaviour["version"]))
    for flag in args.yaml_flags:  # click's answer to an option the version's serve does not have
        if flag not in flags:
            raise StartupError(f"no such option: {flag} (trtllm-serve {behaviour['version']} takes "
                               f"{', '.join(flags)} for the YAML)")
    return behaviour


def _options_step(args, behaviour):
    """Step 2: extra_llm_api_options, checked; the effective settings (logged, with upstream's warnings)."""
    extra = {}
    if args.extra_llm_api_options:
        extra = load_extra_options(args.extra_llm_api_options, args.backend, behaviour["version"])
        log(f"step 2/4: extra_llm_api_options {args.extra_llm_api_options} is valid ({len(extra):d} top-level keys: "
            f"{', '.join(sorted(extra)) or '-'})")
    else:
        log("step 2/4: no --extra_llm_api_options")
    eff = effective_settings(args, extra)
    frac = eff["kv_cache_config"]["free_gpu_memory_fraction"]
    if not 0.0 <= frac <= 1.0:
        raise StartupError(f"kv_cache_config.free_gpu_memory_fraction must be in [0, 1], got {frac!r} "
                           "(from --kv_cache_free_gpu_memory_fraction)")
    spec = eff.get("speculative_config") or None
    log(f"effective settings (YAML overrides CLI): backend={eff['backend']} tp={eff['tensor_parallel_size']} "
        f"pp={eff['pipeline_parallel_size']} max_batch_size={eff['max_batch_size']} "
        f"max_num_tokens={eff['max_num_tokens']} max_seq_len={eff['max_seq_len']} "
        f"kv_cache_config={json.dumps(eff['kv_cache_config'], sort_keys=True)} "
        f"speculative={json.dumps(spec, sort_keys=True) if spec else 'none'}")
    if args.kv_cache_free_gpu_memory_fraction != 0.9 and "kv_cache_config" in extra \
            and "free_gpu_memory_fraction" not in (extra["kv_cache_config"] or {}):
        log("WARNING: the YAML kv_cache_config block replaces the CLI one: "
            f"--kv_cache_free_gpu_memory_fraction {args.kv_cache_free_gpu_memory_fraction} is ignored, "
            "fraction = 0.9", "W")
    if spec and not eff.get("disable_overlap_scheduler", False) and _overlap_unsupported(spec):
        log(f"WARNING: overlap scheduler is not supported with {spec['decoding_type']} speculative decoding; "
            "disabling it", "W")
    return eff


def _overlap_unsupported(spec):
    """Whether the overlap scheduler cannot run with this speculative config (1.2 and 1.3 names alike)."""
    dt = spec["decoding_type"]
    return dt in ("DraftTarget", "Draft_Target", "NGram", "UserProvided", "User_Provided") or \
        (dt in ("Eagle", "Eagle3") and spec.get("eagle3_one_model") is False)


def _mounts_step(args, eff):
    """Step 3: the model, the draft model and (for gpt-oss) the encodings. Returns (served_id, gpt_oss)."""
    log(f"step 3/4: checking model, draft model and encodings (HF cache {hf_hub_cache()}, "
        f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')})")
    served_id, _model_path = check_model(args.model, eff.get("revision"))
    check_draft(eff.get("speculative_config") or None)
    gpt_oss = is_gpt_oss(args.model)
    if gpt_oss:
        problem = tiktoken_problem(verify_hash=True)
        if problem:
            raise StartupError(f"{HARMONY_ERROR} ({problem})")
        log(f"gpt-oss: Harmony encodings found in {os.environ['TIKTOKEN_ENCODINGS_BASE']}")
    return served_id, gpt_oss


def _bind_step(args, behaviour, eff):
    """Step 4, up to the load: crash mode, the GPUs for the world, the port bound, the MPI world joined.
    The bound server, or None when stopped while waiting for the MPI world."""
    if behaviour["mode"] == "crash":
        raise StartupError("stand-in mode 'crash': simulating a failure while loading the model "
                           "(e.g. CUDA out of memory)")
    world = eff["tensor_parallel_size"] * eff["pipeline_parallel_size"]
    check_world(world)
    srv = make_server(args.host, args.port)
    if world > 1 and join_mpi_world(world) is None:
        srv.server_close()
        log("stopped while waiting for the MPI world")
        return None
    return srv


def _load_and_serve(srv, args, behaviour, eff, served_id, gpt_oss):
    """Step 4: "load" the model (connections refused meanwhile), then serve until a stop signal."""
    bound = srv.server_address
    log(f"step 4/4: port {bound[0]}:{bound[1]} bound (not listening yet); loading model for "
        f"{behaviour['load_delay_s']:.1f} s (connections are refused meanwhile)")
    if behaviour["mode"] == "oom_load":
        exhaust_memory("while loading")
    if wait_or_stop(behaviour["load_delay_s"]):
        srv.server_close()
        log("stopped while loading")
        return 0
    hold_device_memory()  # an fd, open until the process ends
    Handler.state = ServerState(behaviour, served_id, args.model, eff, gpt_oss)
    stats = "on" if eff.get("enable_iter_perf_stats") else "off (enable_iter_perf_stats is not true)"
    log(f"performance model (SYNTHETIC, sleeps the modelled time): {Handler.state.describe()}; "
        f"iteration stats at /metrics: {stats}")
    srv.server_activate()
    log(f"model loaded; serving {served_id} on http://{args.host}:{bound[1]} (mode {behaviour['mode']}) -- "
        "Uvicorn-like STAND-IN server listening")
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    while not wait_or_stop(3600):
        pass
    srv.shutdown()
    srv.server_close()
    log("server stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
