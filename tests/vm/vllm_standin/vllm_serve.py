#!/usr/bin/env python3
"""STAND-IN for `vllm serve` of vLLM 0.20.1 (NVIDIA's nvcr.io/nvidia/vllm:26.05.post1-py3): installed as `vllm` in
the lab's vLLM stand-in image. Python 3 standard library only. No GPU, no weights: it enforces the contract a real
server holds a deploy to, and serves synthetic tokens.

What it enforces, written from vLLM's own source at v0.20.1 (vllm/engine/arg_utils.py, vllm/config/speculative.py),
independently of specfleet's engines/vllm_contract.py, so the two check each other:
- the CLI: `vllm serve [MODEL]` and the flags below, with vLLM's spellings, choices and BooleanOptionalAction pairs;
  an unknown flag (e.g. `--disable-log-requests`, gone in 0.20) is argparse's "unrecognized arguments", exit 2;
- `--speculative-config`: JSON (json.loads), extra keys forbidden (pydantic extra="forbid"), `tensor_parallel_size`
  refused with vLLM's pointer, the method inferred as vLLM does when absent, num_speculative_tokens > 0 and required,
  a model required for eagle/eagle3/draft_model/medusa/mlp_speculator/dflash, ngram's prompt lookup (5/5 defaults,
  min <= max, >= 1), EAGLE-3 only for the targets vLLM lists, draft_model's equal vocab sizes;
- `--gpu-memory-utilization` in (0, 1] (CacheConfig Field(gt=0, le=1)), and the engine core's start-up check of it on
  a unified-memory GPU: a share of the total above what is free (MemAvailable) is refused (memory_check);
- a draft whose path vLLM re-reads as another method (speculative.py:580-622: "eagle-", "eagle3", "dflash") takes it;
- the models: with HF_HUB_OFFLINE=1 a repo id resolves in $HF_HOME/hub (refs/main -> a snapshot with config.json
  and *.safetensors) and, as vLLM does, becomes the snapshot path: without --served-model-name the API names the
  model by that path; a draft `model` is a directory with config.json and *.safetensors; gpt-oss needs the harmony
  encodings under $TIKTOKEN_ENCODINGS_BASE.

What it serves: GET /health, /v1/models, /metrics (Prometheus text: vLLM's metric names and labels model_name and
engine), POST /v1/completions and /v1/chat/completions, streamed or not. Each engine step drafts k tokens and accepts
a prefix of them (position i with the acceptance in the stand-in's behaviour, /etc/vllm-standin.json or
$VLLM_STANDIN_BEHAVIOUR, seeded per request), so the spec-decode counters move with the tokens served: per step
drafts += 1, draft_tokens += k, accepted += a, generation_tokens += a + 1.

Credentials: `vllm serve` without `--api-key` (as specfleet runs it) has no use for a client's credentials. The
stand-in logs the NAMES of the credential-like headers a request carries, never their values, in one CREDENTIALS_SEEN
line on stderr (the journal), as the trtllm-serve stand-in does and by the same rule
(tests/vm/standin_common/standin_credentials.py), so that a test can tell what reached the server through a gateway.
"""

from __future__ import annotations

import argparse
import http.server
import json
import math
import os
import random
import signal
import socketserver
import sys
import threading
import time
from pathlib import Path

try:  # the image ships it on python3's path (the trtllm-serve stand-in's, which this image derives from)
    import standin_credentials
except ImportError:  # the source tree: tests/vm/standin_common/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "standin_common"))
    import standin_credentials

VERSION = "0.20.1"
# vllm/config/speculative.py:34-65 at v0.20.1: the methods, and which need a draft model (:461-486)
METHODS = ("ngram", "ngram_gpu", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "dflash",
           "extract_hidden_states", "mtp", "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp")
NEED_MODEL = ("eagle", "eagle3", "draft_model", "medusa", "mlp_speculator", "dflash")
SPEC_FIELDS = {"enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
               "tensor_parallel_size", "quantization", "moe_backend", "max_model_len", "revision", "code_revision",
               "disable_padded_drafter_batch", "use_local_argmax_reduction", "prompt_lookup_max", "prompt_lookup_min",
               "speculative_token_tree", "parallel_drafting", "suffix_decoding_max_tree_depth",
               "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
               "suffix_decoding_min_token_prob", "draft_load_config", "rejection_sample_method",
               "synthetic_acceptance_rates", "synthetic_acceptance_length"}
EAGLE3_TARGETS = ("llama", "qwen", "minicpm", "gpt_oss", "hunyuan_vl", "hunyuan_v1_dense", "afmoe", "nemotron_h",
                  "deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25", "minimax_m2", "gemma4")  # :905-932
KV_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4")
DEFAULT_ACCEPTANCE = {"eagle3": [0.8, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35], "draft_model": [0.7, 0.55, 0.45, 0.35],
                      "ngram": [0.5, 0.4, 0.3, 0.25, 0.2]}


class Refused(Exception):
    """A start vLLM would refuse: one line on stderr, exit 1."""


def log(msg: str, level: str = "INFO") -> None:
    print(f"{level} {time.strftime('%m-%d %H:%M:%S')} [vllm-standin] {msg}", file=sys.stderr, flush=True)


def add_serve_args(s: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`vllm serve`'s arguments (make_arg_parser's, vllm/entrypoints/openai/cli_args.py:317, for the flags modelled)."""
    s.add_argument("model_tag", nargs="?")
    s.add_argument("--model")
    s.add_argument("--host")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", nargs="+")
    s.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    for flag in ("--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--tensor-parallel-size",
                 "--max-cudagraph-capture-size", "--stream-interval"):
        s.add_argument(flag, type=int)
    for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling", "--enforce-eager",
                 "--trust-remote-code", "--enable-log-requests"):
        s.add_argument(flag, action=argparse.BooleanOptionalAction)
    s.add_argument("--disable-log-stats", action="store_true")
    s.add_argument("--kv-cache-dtype", choices=KV_DTYPES, default="auto")
    s.add_argument("--dtype", choices=("auto", "half", "float16", "bfloat16", "float", "float32"), default="auto")
    s.add_argument("--speculative-config", type=json.loads)
    return s


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm")
    sub = p.add_subparsers(dest="command", required=True)
    add_serve_args(sub.add_parser("serve"))
    return p


# ---- the models ------------------------------------------------------------------------------------------------
def _weights(d: Path, what: str) -> dict:
    cfg = d / "config.json"
    if not cfg.is_file() or not list(d.glob("*.safetensors")):
        raise Refused(f"{what} {d}: no config.json and *.safetensors there")
    return json.loads(cfg.read_text())


def resolve(model: str) -> tuple[str, dict]:
    """A repo id resolved offline in $HF_HOME/hub (as huggingface_hub's snapshot_download(local_files_only=True)),
    or a local directory: (its path, its config)."""
    if model.startswith("/"):
        return model, _weights(Path(model), "model")
    if os.environ.get("HF_HUB_OFFLINE") != "1":
        raise Refused(f"{model}: the stand-in runs offline only (set HF_HUB_OFFLINE=1 with a filled HF_HOME)")
    repo = Path(os.environ.get("HF_HOME", "/root/.cache/huggingface")) / "hub" / ("models--" + model.replace("/", "--"))
    try:
        snap = repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    except OSError:
        raise Refused(f"We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
                      f"the cached files: {model} (HF_HUB_OFFLINE)") from None
    return str(snap), _weights(snap, f"model {model}")


def _method(spec: dict) -> str:
    """The method as vLLM settles it (speculative.py:449-453, :587-618), and its own checks of the fields."""
    extra = sorted(set(spec) - SPEC_FIELDS)
    if extra:
        raise Refused(f"1 validation error for SpeculativeConfig\n{extra[0]}: Extra inputs are not permitted")
    if "tensor_parallel_size" in spec:
        raise Refused("'tensor_parallel_size' is not a valid argument in the speculative_config; pass "
                      "'draft_tensor_parallel_size' instead")
    method, model = spec.get("method"), (spec.get("model") or "").lower()
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "eagle3" if "eagle3" in model else \
            "eagle" if "eagle-" in model else "draft_model"
    if method not in METHODS:
        raise Refused(f"1 validation error for SpeculativeConfig\nmethod: Input should be one of {METHODS} "
                      f"[input_value={method!r}]")
    k = spec.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k <= 0):
        raise Refused(f"1 validation error for SpeculativeConfig\nnum_speculative_tokens: Input should be greater "
                      f"than 0 [input_value={k!r}]")
    if spec.get("model") is None and k is not None and method in NEED_MODEL:
        raise Refused("num_speculative_tokens was provided but without speculative model.")
    return method


def _lookup(spec: dict) -> dict:
    """ngram's prompt lookup window (speculative.py:491-517)."""
    lo, hi = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    lo, hi = (5, 5) if lo is None and hi is None else (lo if lo is not None else hi, hi if hi is not None else lo)
    if lo < 1 or hi < 1:
        raise Refused("prompt_lookup_min and prompt_lookup_max must be >= 1")
    if lo > hi:
        raise Refused(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    return {"prompt_lookup_min": lo, "prompt_lookup_max": hi}


def _draft(method: str, model: str, target: dict) -> dict:
    """The draft's config, checked against the target (speculative.py:905-951)."""
    _, draft = resolve(model)
    if method == "eagle3" and not any(t in target.get("model_type", "") for t in EAGLE3_TARGETS):
        raise Refused(f"Eagle3 is only supported for {EAGLE3_TARGETS} models. Got "
                      f"self.target_model_config.hf_text_config.model_type={target.get('model_type')!r}")
    if method == "draft_model" and draft.get("vocab_size") != target.get("vocab_size"):
        raise Refused("Target and draft model should have the same vocabulary size. Target model vocab_size="
                      f"{target.get('vocab_size')}. Draft model vocab_size={draft.get('vocab_size')}.")
    return draft


def _redetected(method: str, model: str | None) -> str:
    """speculative.py:580-622: a method other than eagle/eagle3/dflash is re-read from the draft's path, a
    case-insensitive substring test ("eagle-", "eagle3", "dflash")."""
    if model is None or method in ("eagle", "eagle3", "dflash") or method not in NEED_MODEL:
        return method
    for part, again in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash")):
        if part in model.lower():
            log(f"the draft {model} is taken for method {again} (its path has {part!r})")
            return again
    return method


def speculative(spec: dict, target: dict, tp: int) -> dict:
    """SpeculativeConfig's checks at v0.20.1 (speculative.py); returns the config with the method settled."""
    method = _redetected(_method(spec), spec.get("model"))
    out = {**spec, "method": method, **(_lookup(spec) if method in ("ngram", "ngram_gpu") else {})}
    draft = _draft(method, spec["model"], target) if method in NEED_MODEL else {}
    if out.get("num_speculative_tokens") is None:
        if draft.get("n_predict") is None:
            raise Refused("num_speculative_tokens must be provided with speculative model unless the draft model "
                          "config contains an n_predict parameter.")
        out["num_speculative_tokens"] = draft["n_predict"]
    dtp = spec.get("draft_tensor_parallel_size")
    if dtp is not None and dtp not in (1, tp):
        raise Refused(f"draft_tensor_parallel_size={dtp} cannot be other value than 1 or target model "
                      f"tensor_parallel_size={tp}")
    return out


def _gib(n: int) -> float:
    return round(n / (1 << 30), 2)  # utils/mem_utils.py:27-28 format_gib


def memory_check(util: float, meminfo: Path) -> None:
    """vLLM's start-up check of its share on a unified-memory GPU, before any weights load (v1/worker/utils.py:403-423
    request_memory, in Worker.init_device, gpu_worker.py:282-283): requested = ceil(total * share), refused when what is
    free is less. On a UMA device free is psutil's available, /proc/meminfo's MemAvailable (utils/mem_utils.py:108-116);
    total is cudaMemGetInfo's, which the STAND-IN takes as MemTotal (a GB10's CUDA total is close to it: unverified,
    and the stricter reading). `meminfo`: /proc/meminfo, or the behaviour's."""
    fields = dict(line.split(":", 1) for line in meminfo.read_text().splitlines() if ":" in line)
    total, free = (int(fields[k].split()[0]) * 1024 for k in ("MemTotal", "MemAvailable"))
    requested = math.ceil(total * util)
    if free < requested:
        raise Refused(f"ValueError: Free memory on device cuda:0 ({_gib(free)}/{_gib(total)} GiB) on startup is less "
                      f"than desired GPU memory utilization ({util}, {_gib(requested)} GiB). Decrease GPU memory "
                      "utilization or reduce GPU memory used by other processes.\nEngineCore failed to start.\n"
                      "RuntimeError: Engine core initialization failed. See root cause above.")
    log(f"memory: {_gib(free)} GiB free of {_gib(total)} GiB; the share {util} asks {_gib(requested)} GiB")


def start(args: argparse.Namespace, meminfo: Path = Path("/proc/meminfo")) -> dict:
    model = args.model_tag or args.model or "Qwen/Qwen3-0.6B"
    if not 0 < args.gpu_memory_utilization <= 1:
        raise Refused(f"1 validation error for CacheConfig\ngpu_memory_utilization: Input should be greater than 0 "
                      f"and less than or equal to 1 [input_value={args.gpu_memory_utilization}]")
    tp = args.tensor_parallel_size or 1
    if tp != 1:
        raise Refused(f"World size ({tp}) is larger than the number of available GPUs (1) in this node")
    path, target = resolve(model)
    if "gpt_oss" in target.get("model_type", ""):
        base = Path(os.environ.get("TIKTOKEN_ENCODINGS_BASE", "/nonexistent"))
        if not (base / "o200k_base.tiktoken").is_file():
            raise Refused("openai_harmony.HarmonyError: error downloading or loading vocab file: failed to download or "
                          "load vocab file (set TIKTOKEN_ENCODINGS_BASE to a directory with o200k_base.tiktoken)")
    spec = speculative(args.speculative_config, target, tp) if args.speculative_config else None
    memory_check(args.gpu_memory_utilization, meminfo)  # the engine core's, after the config (api process) is built
    name = (args.served_model_name or [path if not model.startswith("/") else model])[0]
    return {"name": name, "spec": spec, "prefix_caching": args.enable_prefix_caching is not False,
            "gpu_memory_utilization": args.gpu_memory_utilization}


# ---- serving ---------------------------------------------------------------------------------------------------
class Engine:
    """The synthetic engine: steps, tokens and vLLM's counters (one lock: requests run concurrently)."""

    def __init__(self, cfg: dict, behaviour: dict):
        self.cfg, self.lock = cfg, threading.Lock()
        spec = cfg["spec"] or {}
        self.k = int(spec.get("num_speculative_tokens") or 0)
        acc = behaviour.get("acceptance", {}).get(spec.get("method"), DEFAULT_ACCEPTANCE.get(spec.get("method"), []))
        self.acceptance = [acc[i] if i < len(acc) else 0.0 for i in range(self.k)]
        self.step_s = float(behaviour.get("step_ms", 2.0)) / 1000
        self.c = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "generation": 0, "prompt": 0, "running": 0}
        self.per_pos = [0] * self.k
        # every counter's labelled children are made when the stat logger starts (vllm/v1/metrics/loggers.py:429-439,
        # utils.py:11-19 create_metric_per_engine), and prometheus_client stamps each child then (0.21.1 metrics.py:304-307)
        self.created = time.time()

    def steps(self, seed: int, max_tokens: int):
        """Yields the number of tokens each engine step produces, counting them."""
        rng, done = random.Random(seed), 0
        while done < max_tokens:
            time.sleep(self.step_s)
            accepted = 0
            while accepted < self.k and rng.random() < self.acceptance[accepted]:
                accepted += 1
            n = min(accepted + 1, max_tokens - done)
            with self.lock:
                if self.k:
                    self.c["drafts"] += 1
                    self.c["draft_tokens"] += self.k
                    self.c["accepted"] += accepted
                    for i in range(accepted):
                        self.per_pos[i] += 1
                self.c["generation"] += n
            done += n
            yield n

    def metrics(self) -> str:
        """/metrics as vLLM serves it with one API server: prometheus_client's default registry in its text format
        0.0.4 (vllm/v1/metrics/prometheus.py:39-52; an exposition without an Accept header). Each counter's `_total`
        samples, then its `_created` samples as a gauge of their own (prometheus_client 0.21.1 exposition.py:288-305;
        none when PROMETHEUS_DISABLE_CREATED_SERIES is true, metrics.py:67-71), and the process collector's
        process_start_time_seconds (process_collector.py:48-72)."""
        labels = f'engine="0",model_name="{self.cfg["name"]}"'
        with self.lock:
            c, per_pos = dict(self.c), list(self.per_pos)
        lines = [f"vllm:num_requests_running{{{labels}}} {c['running']}.0",
                 f"vllm:num_requests_waiting{{{labels}}} 0.0"]
        lines += self._counter("vllm:prompt_tokens", [(labels, c["prompt"])])
        lines += self._counter("vllm:generation_tokens", [(labels, c["generation"])])
        if self.k:  # the series exist only with a speculative config (v1/spec_decode/metrics.py:150-152)
            lines += self._counter("vllm:spec_decode_num_drafts", [(labels, c["drafts"])])
            lines += self._counter("vllm:spec_decode_num_draft_tokens", [(labels, c["draft_tokens"])])
            lines += self._counter("vllm:spec_decode_num_accepted_tokens", [(labels, c["accepted"])])
            lines += self._counter("vllm:spec_decode_num_accepted_tokens_per_pos",
                                   [(f'{labels},position="{i}"', n) for i, n in enumerate(per_pos)])
        lines += ["# TYPE process_start_time_seconds gauge", f"process_start_time_seconds {PROCESS_START}"]
        return "\n".join(lines) + "\n"

    def _counter(self, name: str, children: list[tuple[str, int]]) -> list[str]:
        lines = [f"# TYPE {name}_total counter", *(f"{name}_total{{{lab}}} {n}.0" for lab, n in children)]
        if os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in ("true", "1", "t"):
            lines += [f"# TYPE {name}_created gauge", *(f"{name}_created{{{lab}}} {self.created!r}" for lab, _ in children)]
        return lines


def process_start() -> float:
    """The process's start as prometheus_client's ProcessCollector reads it (0.21.1 process_collector.py:48-72): starttime
    (clock ticks after boot, /proc/self/stat field 22) / SC_CLK_TCK + btime (/proc/stat)."""
    with open("/proc/self/stat", "rb") as fh:
        starttime = float(fh.read().split(b")")[-1].split()[19])
    with open("/proc/stat", "rb") as fh:
        btime = next(float(line.split()[1]) for line in fh if line.startswith(b"btime "))
    return starttime / os.sysconf("SC_CLK_TCK") + btime


PROCESS_START = process_start()


WORDS = ("the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "on", "was", "by", "this")


class Handler(http.server.BaseHTTPRequestHandler):
    engine: Engine
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # noqa: ANN001, ANN002
        pass

    def parse_request(self) -> bool:
        ok = http.server.BaseHTTPRequestHandler.parse_request(self)
        line = standin_credentials.credentials_line(self.headers, self.command, self.path) if ok else None
        if line:
            log(line, "WARNING")
        return ok

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        name = self.engine.cfg["name"]
        if self.path == "/health":
            self._send(200, b"")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [
                {"id": name, "object": "model", "owned_by": "vllm", "root": name}]}).encode())
        elif self.path == "/metrics":
            self._send(200, self.engine.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, json.dumps({"detail": "Not Found"}).encode())

    def do_POST(self) -> None:  # noqa: N802
        chat = self.path == "/v1/chat/completions"
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            return self._send(404, json.dumps({"detail": "Not Found"}).encode())
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self._send(400, json.dumps({"error": {"message": "invalid JSON", "code": 400}}).encode())
        # a request without `model` is the served model's (vllm/entrypoints/openai serving's _is_model_supported:
        # no name -> supported; the protocol's model is optional), as the gateway's /models/<model>/ route sends it
        if body.get("model") and body["model"] != self.engine.cfg["name"]:
            msg = f"The model `{body.get('model')}` does not exist."
            return self._send(404, json.dumps({"error": {"message": msg, "type": "NotFoundError", "code": 404}}).encode())
        body["model"] = self.engine.cfg["name"]
        prompt = json.dumps(body.get("messages")) if chat else str(body.get("prompt", ""))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        with self.engine.lock:
            self.engine.c["prompt"] += len(prompt.split())
            self.engine.c["running"] += 1
        try:
            self._complete(chat, body, prompt, max_tokens)
        finally:
            with self.engine.lock:
                self.engine.c["running"] -= 1
        return None

    def _complete(self, chat: bool, body: dict, prompt: str, max_tokens: int) -> None:
        rid, kind = f"cmpl-{random.getrandbits(64):016x}", "chat.completion" if chat else "text_completion"
        seed = sum(map(ord, prompt)) + max_tokens
        words = [WORDS[(seed + i) % len(WORDS)] for i in range(max_tokens)]
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": max_tokens,
                 "total_tokens": len(prompt.split()) + max_tokens}
        if not body.get("stream"):
            for _ in self.engine.steps(seed, max_tokens):
                pass
            text = "".join(" " + w for w in words)
            choice = {"index": 0, "finish_reason": "length",
                      **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
            return self._send(200, json.dumps({"id": rid, "object": kind, "model": body["model"], "choices": [choice],
                                               "usage": usage}).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        done = 0
        for n in self.engine.steps(seed, max_tokens):
            text = "".join(" " + w for w in words[done:done + n])
            done += n
            delta = {"delta": {"content": text}} if chat else {"text": text}
            self._chunk({"id": rid, "object": kind + (".chunk" if chat else ""), "model": body["model"],
                         "choices": [{"index": 0, **delta, "finish_reason": "length" if done >= max_tokens else None}]})
        self._chunk({"id": rid, "object": kind, "model": body["model"], "choices": [], "usage": usage})
        self._raw(b"data: [DONE]\n\n")
        self._raw(b"")
        return None

    def _chunk(self, obj: dict) -> None:
        self._raw(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def _raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def behaviour() -> dict:
    path = Path(os.environ.get("VLLM_STANDIN_BEHAVIOUR", "/etc/vllm-standin.json"))
    return json.loads(path.read_text()) if path.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    log(f"vLLM API server version {VERSION} (STAND-IN, synthetic tokens)")
    how = behaviour()
    try:
        cfg = start(args, Path(how.get("meminfo", "/proc/meminfo")))
    except Refused as exc:
        print(f"ERROR [vllm-standin] {exc}".replace("\n", ": "), file=sys.stderr, flush=True)
        return 1
    Handler.engine = Engine(cfg, how)
    server = Server((args.host or "0.0.0.0", args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    log(f"serving {cfg['name']} (speculative {json.dumps(cfg['spec'], sort_keys=True)}, gpu_memory_utilization "
        f"{cfg['gpu_memory_utilization']}) on http://{args.host or '0.0.0.0'}:{args.port}")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
