"""Tests for the trtllm-serve STAND-IN (tests/vm/trtllm_standin).

Fast tests run trtllm_serve.py as a subprocess on the controller against a fake
Hugging Face cache in tmp_path (no VM, no docker).  The one @pytest.mark.slow
test checks the real rootfs tarball, on the Debian base mmdebstrap builds in the
lab's cache (SPECFLEET_CACHE_DIR; the session fleet's stand-in has the same base)
unless cached there: cold or warm, it runs (it prints the tarball size and the
base / cached / variant times -- run with -s to see them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.vm.conftest import cache_dir
from tests.vm.trtllm_standin import image
from tests.vm.trtllm_standin import trtllm_serve as standin

SCRIPT = Path(standin.__file__).resolve()

EAGLE_MODEL = "openai/gpt-oss-120b"
DT_MODEL = "nvidia/Llama-3.3-70B-Instruct-FP4"

EAGLE_SEED = {
    "enable_attention_dp": False,
    "disable_overlap_scheduler": False,
    "enable_autotuner": False,
    "cuda_graph_config": {"max_batch_size": 1},
    "speculative_config": {"decoding_type": "Eagle", "max_draft_len": 5,
                           "speculative_model_dir": "/opt/gpt-oss-120b-Eagle3/"},
    "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
}
DT_SEED = {
    "print_iter_log": False,
    "disable_overlap_scheduler": True,
    "speculative_config": {"decoding_type": "DraftTarget", "max_draft_len": 4,
                           "speculative_model_dir": "/opt/Llama-3.1-8B-Instruct-FP4/"},
    "kv_cache_config": {"enable_block_reuse": False},
}


# ---------------------------------------------------------------- fixtures
def _fake_hf_model(hub: Path, repo_id: str, shards: list[str], commit: str) -> Path:
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    (repo / "refs").mkdir(parents=True)
    (repo / "blobs").mkdir()
    snap.mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    files = {"config.json": json.dumps({"architectures": ["Fake"]}), **{s: "weights " + s for s in shards}}
    if len(shards) > 1:
        files["model.safetensors.index.json"] = json.dumps(
            {"metadata": {}, "weight_map": {f"layer.{i:d}": s for i, s in enumerate(shards)}})
    for i, (name, content) in enumerate(files.items()):
        blob = repo / "blobs" / f"{i + 1:064x}"
        blob.write_text(content)
        (snap / name).symlink_to(os.path.relpath(blob, snap))  # like huggingface_hub
    return snap


@pytest.fixture
def world(tmp_path):
    """A fake HF cache with both seed targets, two draft dirs, tiktoken files, configs."""
    hf_home = tmp_path / "hf"
    hub = hf_home / "hub"
    eagle_snap = _fake_hf_model(hub, EAGLE_MODEL, ["model-00000-of-00002.safetensors",
                                                   "model-00001-of-00002.safetensors"], "a" * 40)
    dt_snap = _fake_hf_model(hub, DT_MODEL, ["model.safetensors"], "b" * 40)
    drafts = {}
    for name in ("gpt-oss-120b-Eagle3", "Llama-3.1-8B-Instruct-FP4"):
        d = tmp_path / "opt" / name
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / "model.safetensors").write_text("x")
        drafts[name] = d
    tik = tmp_path / "tiktoken"
    tik.mkdir()
    for n in ("o200k_base.tiktoken", "cl100k_base.tiktoken"):
        (tik / n).write_text("fake encoding\n")
    eagle_yaml = dict(EAGLE_SEED, enable_iter_perf_stats=True)
    eagle_yaml["speculative_config"] = dict(EAGLE_SEED["speculative_config"],
                                            speculative_model_dir=str(drafts["gpt-oss-120b-Eagle3"]) + "/")
    dt_yaml = dict(DT_SEED)
    dt_yaml["speculative_config"] = dict(DT_SEED["speculative_config"],
                                         speculative_model_dir=str(drafts["Llama-3.1-8B-Instruct-FP4"]) + "/")

    class World:
        pass

    w = World()
    w.tmp, w.hf_home, w.hub, w.tiktoken, w.drafts = tmp_path, hf_home, hub, tik, drafts
    w.eagle_snap, w.dt_snap = eagle_snap, dt_snap
    w.eagle_yaml = write_yaml(tmp_path / "eagle.yaml", eagle_yaml)
    w.dt_yaml = write_yaml(tmp_path / "dt.yaml", dt_yaml)

    def env(mode="ok", delay=0.2, version="1.2.0rc6", perf=None, **extra):
        text = image.variant_config_json(mode, delay, version, **(perf or {}))
        cfg = tmp_path / (f"standin-{mode}-{delay}-{hashlib.sha256(text.encode()).hexdigest()[:8]}.json")
        cfg.write_text(text)
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
             "TRTLLM_STANDIN_CONFIG": str(cfg), "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1",
             "TIKTOKEN_ENCODINGS_BASE": str(tik)}
        e.update({k: v for k, v in extra.items() if v is not None})
        for k in [k for k, v in extra.items() if v is None]:
            e.pop(k, None)
        return e

    w.env = env
    return w


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_standin(args, env, timeout=10):
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def eagle_args(w, port):
    return [EAGLE_MODEL, "--host", "127.0.0.1", "--port", str(port), "--backend", "pytorch",
            "--tp_size", "1", "--max_batch_size", "1", "--extra_llm_api_options", str(w.eagle_yaml)]


def dt_args(w, port):
    return [DT_MODEL, "--host", "127.0.0.1", "--port", str(port), "--backend", "pytorch", "--tp_size", "1",
            "--max_batch_size", "1", "--kv_cache_free_gpu_memory_fraction", "0.9",
            "--extra_llm_api_options", str(w.dt_yaml)]


def http(port, method, path, body=None, raw=None, timeout=5):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port:d}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            payload = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        payload, status = e.read(), e.code
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload


def connect_refused(port) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return False
    except ConnectionRefusedError:
        return True


class Server:
    def __init__(self, args, env, port):
        self.port = port
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.refused_before_ready = 0
        self.ready_after = None

    def wait_ready(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"stand-in exited {self.proc.returncode}:\n{self.proc.stdout.read()}")
            if connect_refused(self.port):
                self.refused_before_ready += 1
                time.sleep(0.05)
                continue
            self.ready_after = time.monotonic() - self.t0
            return self
        raise AssertionError(f"stand-in not listening after {timeout}s")

    def stop(self, sig=signal.SIGTERM, timeout=5):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        t = time.monotonic()
        rc = self.proc.wait(timeout=timeout)
        took = time.monotonic() - t
        out = self.proc.stdout.read()
        self.proc.stdout.close()
        return rc, took, out


@pytest.fixture
def serve(world):
    servers = []

    def start(args_fn, port=None, **env_kw):
        port = port or free_port()
        s = Server(args_fn(world, port) if callable(args_fn) else args_fn, world.env(**env_kw), port)
        servers.append(s)
        return s

    yield start
    for s in servers:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()
        s.proc.stdout.close()


# ---------------------------------------------------------------- CLI
def test_help_and_version_say_standin(world):
    r = run_standin(["--help"], world.env())
    assert r.returncode == 0 and "STAND-IN" in r.stdout and "NOT TensorRT-LLM" in r.stdout
    for flag in ("--host", "--port", "--backend", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
                 "--tp_size", "--pp_size", "--kv_cache_free_gpu_memory_fraction", "--extra_llm_api_options",
                 "--trust_remote_code", "--log_level", "--revision"):
        assert flag in r.stdout
    r = run_standin(["--version"], world.env(version="1.2.0rc6"))
    assert r.returncode == 0 and "1.2.0rc6-standin" in r.stdout and "STAND-IN" in r.stdout
    assert "STAND-IN" in standin.__doc__ and "NOT TensorRT-LLM" in standin.__doc__
    assert SCRIPT.read_text().startswith("#!/usr/bin/python3\n")
    assert os.access(SCRIPT, os.X_OK)


@pytest.mark.parametrize("argv", [
    [EAGLE_MODEL, "--max_draft_len", "4"],
    [EAGLE_MODEL, "--backend", "vllm"],
    [EAGLE_MODEL, "--max_batch", "1"],  # no abbreviations (click has none)
])
def test_bad_command_line_rejected(world, argv):
    r = run_standin(argv, world.env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "usage: trtllm-serve" in r.stderr


# ---------------------------------------------------------------- YAML validation
def test_seed_yamls_are_valid_as_published():
    assert standin.validate_extra_options(EAGLE_SEED) == []
    assert standin.validate_extra_options(DT_SEED) == []
    assert standin.validate_extra_options(yaml.safe_load(yaml.safe_dump(EAGLE_SEED))) == []
    ngram = {"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2,
                                    "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False}}
    mtp = {"speculative_config": {"decoding_type": "MTP", "num_nextn_predict_layers": 3}}
    misc = {"cuda_graph_config": None, "speculative_config": None, "max_num_tokens": 4096,
            "enable_chunked_prefill": True, "kv_cache_config": {"free_gpu_memory_fraction": 0, "dtype": "auto",
                                                                "max_tokens": 1024},
            "tensor_parallel_size": 1, "backend": "pytorch", "moe_config": {"backend": "CUTLASS"},
            "attn_backend": "TRTLLM", "stream_interval": 2, "trust_remote_code": True}
    eagle_extras = {"speculative_config": dict(EAGLE_SEED["speculative_config"], eagle3_one_model=False)}
    for doc in (ngram, mtp, misc, eagle_extras, {}):
        assert standin.validate_extra_options(doc) == [], doc


BAD_YAML = [
    # (id, yaml text, substring expected in the error)
    ("top-level-list", "- a\n- b\n", "must be a mapping"),
    ("empty-file", "", "must be a mapping"),
    ("not-yaml", "a: [1, 2\n", "not valid YAML"),
    ("unknown-top", "disable_overlap_scheduler: true\nenable_overlap: true\n", "enable_overlap: unknown key"),
    ("misspelled-top", "print_iter_logs: false\n", "did you mean 'print_iter_log'"),
    ("unknown-kv", "kv_cache_config: {free_gpu_memory_fraction: 0.9, enable_block_reuse: false, reuse: 1}\n",
     "kv_cache_config.reuse: unknown key"),
    ("unknown-cuda-graph", "cuda_graph_config: {max_batch_size: 1, padding: true}\n",
     "cuda_graph_config.padding: unknown key"),
    ("unknown-spec", "speculative_config: {decoding_type: Eagle, max_draft_len: 5, "
                     "speculative_model_dir: /d, draft_len: 3}\n", "speculative_config.draft_len: unknown key"),
    ("ngram-key-on-eagle", "speculative_config: {decoding_type: Eagle, max_draft_len: 5, "
                           "speculative_model_dir: /d, max_matching_ngram_size: 2}\n",
     "speculative_config.max_matching_ngram_size: unknown key"),
    ("eagle3", "speculative_config: {decoding_type: Eagle3, max_draft_len: 5, speculative_model_dir: /d}\n",
     "invalid decoding type 'Eagle3'"),
    ("medusa-pytorch", "speculative_config: {decoding_type: Medusa, max_draft_len: 5}\n",
     "only supported by the TensorRT engine backend"),
    ("no-decoding-type", "speculative_config: {max_draft_len: 5}\n", "decoding_type: field required"),
    ("max-draft-0", "speculative_config: {decoding_type: DraftTarget, max_draft_len: 0, "
                    "speculative_model_dir: /d}\n", "speculative_config.max_draft_len: must be > 0"),
    ("max-draft-missing", "speculative_config: {decoding_type: NGram, max_matching_ngram_size: 2}\n",
     "speculative_config.max_draft_len: required"),
    ("no-draft-dir", "speculative_config: {decoding_type: Eagle, max_draft_len: 5}\n",
     "speculative_config.speculative_model_dir: required"),
    ("ngram-size-missing", "speculative_config: {decoding_type: NGram, max_draft_len: 4}\n",
     "max_matching_ngram_size: required"),
    ("fraction-1.5", "kv_cache_config: {free_gpu_memory_fraction: 1.5}\n",
     "kv_cache_config.free_gpu_memory_fraction: must be <= 1"),
    ("fraction-negative", "kv_cache_config: {free_gpu_memory_fraction: -0.1}\n", "must be >= 0"),
    ("string-for-int", "speculative_config: {decoding_type: Eagle, max_draft_len: '5', "
                       "speculative_model_dir: /d}\n", "speculative_config.max_draft_len: expected an integer"),
    ("string-for-int-top", "max_num_tokens: '8192'\n", "max_num_tokens: expected an integer"),
    ("bool-for-int", "cuda_graph_config: {max_batch_size: true}\n",
     "cuda_graph_config.max_batch_size: expected an integer"),
    ("string-for-bool", "disable_overlap_scheduler: 'false'\n", "disable_overlap_scheduler: expected a bool"),
    ("int-for-bool", "kv_cache_config: {enable_block_reuse: 0}\n", "kv_cache_config.enable_block_reuse: expected a bool"),
    ("batch-sizes-item", "cuda_graph_config: {batch_sizes: [1, two]}\n", "cuda_graph_config.batch_sizes[1]"),
    ("kv-null", "kv_cache_config: null\n", "kv_cache_config: may not be null"),
    ("bad-backend", "backend: vllm\n", "backend: must be one of"),
    ("trt-rejects-torch-key", "backend: tensorrt\ndisable_overlap_scheduler: true\n",
     "disable_overlap_scheduler: unknown key"),
]


# run end-to-end as a subprocess (the rest of the table is checked in-process below, to stay fast)
SUBPROCESS_BAD_YAML = ("top-level-list", "not-yaml", "unknown-top", "unknown-kv", "unknown-spec", "eagle3",
                       "max-draft-0", "no-draft-dir", "fraction-1.5", "string-for-int", "trt-rejects-torch-key")


@pytest.mark.parametrize("text,expected", [b[1:] for b in BAD_YAML if b[0] in SUBPROCESS_BAD_YAML],
                         ids=[b[0] for b in BAD_YAML if b[0] in SUBPROCESS_BAD_YAML])
def test_bad_yaml_refused_before_listening(world, text, expected):
    port = free_port()
    cfg = write_yaml(world.tmp / "bad.yaml", text)
    r = run_standin([EAGLE_MODEL, "--host", "127.0.0.1", "--port", str(port),
                     "--extra_llm_api_options", str(cfg)], world.env(delay=0))
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert expected in out, out
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1, out
    assert "never listened" in errors[0] and "step 3/4" not in out and "bound" not in out


def test_bad_yaml_table_matches_validator_directly():
    # every bad case except the file-level ones is also refused by the importable validator
    for ident, text, expected in BAD_YAML:
        if ident in ("not-yaml",):
            continue
        errs = standin.validate_extra_options(yaml.safe_load(text))
        assert errs and any(expected in e for e in errs), (ident, errs)


def test_missing_yaml_file(world):
    r = run_standin([EAGLE_MODEL, "--extra_llm_api_options", str(world.tmp / "nope.yaml")], world.env())
    assert r.returncode == 1 and "cannot read --extra_llm_api_options" in r.stdout


def test_cli_fraction_out_of_range(world):
    r = run_standin([DT_MODEL, "--kv_cache_free_gpu_memory_fraction", "1.2"], world.env())
    assert r.returncode == 1 and "free_gpu_memory_fraction must be in [0, 1]" in r.stdout


# ---------------------------------------------------------------- mounts
def _assert_refused(r, *needles):
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    for n in needles:
        assert n in out, out
    assert "bound" not in out and "listening" not in out.replace("never listened", "")


def test_missing_snapshot(world):
    shutil.rmtree(world.eagle_snap)
    r = run_standin(eagle_args(world, free_port()), world.env())
    _assert_refused(r, "snapshot", "does not exist", "HF_HUB_OFFLINE=1")


def test_model_not_in_cache_and_not_offline_would_download(world):
    shutil.rmtree(world.hub / "models--openai--gpt-oss-120b")
    r = run_standin(eagle_args(world, free_port()), world.env(HF_HUB_OFFLINE=None))
    _assert_refused(r, "not in the Hugging Face cache", "would now try to download openai/gpt-oss-120b")


def test_missing_weight_shard(world):
    (world.eagle_snap / "model-00001-of-00002.safetensors").unlink()
    r = run_standin(eagle_args(world, free_port()), world.env())
    _assert_refused(r, "1 of 2 weight files named by model.safetensors.index.json are missing",
                    "model-00001-of-00002.safetensors")


def test_dangling_blob_symlink_counts_as_missing(world):
    target = (world.dt_snap / "model.safetensors").resolve()
    target.unlink()
    r = run_standin(dt_args(world, free_port()), world.env())
    _assert_refused(r, "no *.safetensors weight file")


def test_missing_config_json(world):
    (world.dt_snap / "config.json").unlink()
    r = run_standin(dt_args(world, free_port()), world.env())
    _assert_refused(r, "has no config.json")


def test_hf_hub_cache_env_is_honoured(world):
    moved = world.tmp / "elsewhere"
    shutil.move(str(world.hub), str(moved))
    r = run_standin(dt_args(world, free_port()), world.env(mode="crash", HF_HUB_CACHE=str(moved)))
    assert r.returncode == 1 and "resolved in the HF cache" in r.stdout and "mode 'crash'" in r.stdout


@pytest.mark.parametrize("which", ["eagle", "dt"])
def test_missing_draft_dir(world, which):
    name = "gpt-oss-120b-Eagle3" if which == "eagle" else "Llama-3.1-8B-Instruct-FP4"
    shutil.rmtree(world.drafts[name])
    args = eagle_args(world, free_port()) if which == "eagle" else dt_args(world, free_port())
    r = run_standin(args, world.env())
    _assert_refused(r, "speculative_config.speculative_model_dir", "does not exist")


def test_draft_dir_without_config_json(world):
    (world.drafts["Llama-3.1-8B-Instruct-FP4"] / "config.json").unlink()
    r = run_standin(dt_args(world, free_port()), world.env())
    _assert_refused(r, "speculative_model_dir", "no config.json")


@pytest.mark.parametrize("case", ["unset", "no-o200k", "no-cl100k"])
def test_missing_tiktoken(world, case):
    extra = {}
    if case == "unset":
        extra["TIKTOKEN_ENCODINGS_BASE"] = None
    else:
        (world.tiktoken / ("o200k_base.tiktoken" if case == "no-o200k" else "cl100k_base.tiktoken")).unlink()
    r = run_standin(eagle_args(world, free_port()), world.env(**extra))
    _assert_refused(r, "HarmonyError", "TIKTOKEN_ENCODINGS_BASE")


def test_tiktoken_not_needed_for_non_gpt_oss(world):
    r = run_standin(dt_args(world, free_port()), world.env(mode="crash", TIKTOKEN_ENCODINGS_BASE=None))
    assert r.returncode == 1 and "mode 'crash'" in r.stdout and "Harmony" not in r.stdout


def test_local_model_dir_needs_config_json(world):
    d = world.tmp / "ckpt"
    d.mkdir()
    r = run_standin([str(d)], world.env())
    _assert_refused(r, "has no config.json")
    r = run_standin([str(world.tmp / "absent")], world.env())
    _assert_refused(r, "does not exist")


# ---------------------------------------------------------------- modes & serving
def test_crash_mode_exits_1_without_listening(world):
    port = free_port()
    r = run_standin(eagle_args(world, port), world.env(mode="crash"))
    _assert_refused(r, "mode 'crash'", "step 3/4")
    assert connect_refused(port)


def test_eagle_server_load_delay_and_endpoints(world, serve):
    s = serve(eagle_args, delay=0.8)
    time.sleep(0.3)
    assert s.proc.poll() is None and connect_refused(s.port), "must refuse connections while loading"
    s.wait_ready()
    assert s.refused_before_ready >= 1 and s.ready_after >= 0.7
    p = s.port

    assert http(p, "GET", "/health")[0] == 200
    st, models = http(p, "GET", "/v1/models")
    assert st == 200 and models["object"] == "list" and len(models["data"]) == 1
    m = models["data"][0]
    assert m["id"] == EAGLE_MODEL and m["object"] == "model" and m["owned_by"] == "tensorrt_llm"
    assert isinstance(m["created"], int)
    assert http(p, "GET", "/version") == (200, {"version": "1.2.0rc6-standin"})
    assert http(p, "GET", "/metrics") == (200, [])

    prompt = "A train leaves at 180 km ... how far?"
    st, c = http(p, "POST", "/v1/completions",
                 {"model": EAGLE_MODEL, "prompt": prompt, "max_tokens": 300, "temperature": 0.7})
    assert st == 200, c
    assert set(c) >= {"id", "object", "created", "model", "choices", "usage"}
    assert c["object"] == "text_completion" and c["model"] == EAGLE_MODEL
    ch = c["choices"][0]
    assert ch["index"] == 0 and ch["logprobs"] is None and ch["finish_reason"] == "stop"
    assert "STAND-IN" in ch["text"] and "max_tokens=300" in ch["text"]
    u = c["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] > 0
    # deterministic
    c2 = http(p, "POST", "/v1/completions", {"model": EAGLE_MODEL, "prompt": prompt, "max_tokens": 300})[1]
    assert c2["choices"][0]["text"] == ch["text"]
    st, c3 = http(p, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 4})
    assert st == 200 and c3["choices"][0]["finish_reason"] == "length"
    assert "max_tokens=4" in c3["choices"][0]["text"] and c3["usage"]["completion_tokens"] == 4

    st, e = http(p, "POST", "/v1/completions", {"model": "openai/gpt-oss-20b", "prompt": "x"})
    assert st == 400 and e["object"] == "error" and "gpt-oss-20b" in e["message"] and e["code"] == 400
    st, e = http(p, "POST", "/v1/completions", raw=b"{not json")
    assert st == 400 and e["object"] == "error" and "JSON" in e["message"]
    st, e = http(p, "POST", "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": "9"})
    assert st == 400

    st, chat = http(p, "POST", "/v1/chat/completions",
                    {"model": EAGLE_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20})
    assert st == 200 and chat["object"] == "chat.completion"
    msg = chat["choices"][0]["message"]
    assert msg["role"] == "assistant" and "STAND-IN" in msg["content"]
    assert chat["choices"][0]["finish_reason"] in ("stop", "length") and "usage" in chat
    st, e = http(p, "POST", "/v1/chat/completions", {"model": EAGLE_MODEL, "messages": []})
    assert st == 400 and e["object"] == "error"

    st, metrics = http(p, "GET", "/metrics")
    assert st == 200 and isinstance(metrics, list) and metrics
    spec = [x["specDecodingStats"] for x in metrics]
    assert all(set(sd) >= {"numDraftTokens", "numAcceptedTokens", "acceptanceLength"} for sd in spec)
    assert spec[0]["numDraftTokens"] == 0 and metrics[0]["inflightBatchingStats"]["numCtxTokens"] > 0  # context
    assert spec[1]["numDraftTokens"] == 5 and spec[1]["acceptanceLength"] >= 1  # then k = max_draft_len
    assert http(p, "GET", "/metrics") == (200, [])  # drained

    assert http(p, "GET", "/nope")[0] == 404

    # Harmony rule: chat needs the encodings (files vanish after start-up -> 400), completions do not
    (world.tiktoken / "o200k_base.tiktoken").unlink()
    st, e = http(p, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert st == 400 and "HarmonyError" in e["message"]
    assert http(p, "POST", "/v1/completions", {"prompt": "x"})[0] == 200

    rc, took, out = s.stop()
    assert rc == 0 and took < 1.0, (took, out)
    assert "STAND-IN" in out and '"GET /health HTTP/1.1" 200' in out and '"POST /v1/completions HTTP/1.1" 400' in out
    assert "received SIGTERM" in out


def test_draft_target_server_and_no_metrics_without_iter_stats(world, serve):
    s = serve(dt_args).wait_ready()
    p = s.port
    assert http(p, "GET", "/health")[0] == 200
    assert http(p, "GET", "/v1/models")[1]["data"][0]["id"] == DT_MODEL
    st, c = http(p, "POST", "/v1/completions", {"model": DT_MODEL, "prompt": "Explain the benefits of "
                                                "speculative decoding:", "max_tokens": 150})
    assert st == 200 and "max_tokens=150" in c["choices"][0]["text"]
    st, chat = http(p, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert st == 200  # not gpt-oss: no Harmony requirement
    assert http(p, "GET", "/metrics") == (200, [])
    rc, took, out = s.stop()
    assert rc == 0 and took < 1.0
    assert "overlap scheduler" not in out  # disabled explicitly in the DT seed


def test_yaml_overrides_cli_and_kv_block_replaces_cli_fraction(world):
    y = write_yaml(world.tmp / "o.yaml", {"max_batch_size": 8, "kv_cache_config": {"enable_block_reuse": False}})
    r = run_standin([DT_MODEL, "--max_batch_size", "1", "--kv_cache_free_gpu_memory_fraction", "0.5",
                     "--extra_llm_api_options", str(y)], world.env(mode="crash"))
    assert r.returncode == 1 and "mode 'crash'" in r.stdout
    assert "max_batch_size=8" in r.stdout and '"free_gpu_memory_fraction": 0.9' in r.stdout
    assert "--kv_cache_free_gpu_memory_fraction 0.5 is ignored" in r.stdout


def test_never_healthy_mode(world, serve):
    s = serve(dt_args, mode="never_healthy").wait_ready()
    for _ in range(2):
        assert http(s.port, "GET", "/health")[0] == 503
    assert http(s.port, "GET", "/v1/models")[0] == 200
    assert s.stop()[0] == 0


def test_empty_mode(world, serve):
    s = serve(eagle_args, mode="empty").wait_ready()
    st, c = http(s.port, "POST", "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": 30})
    assert st == 200 and c["choices"][0]["text"] == "" and c["usage"]["completion_tokens"] == 0
    st, chat = http(s.port, "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    assert st == 200 and chat["choices"][0]["message"]["content"] == ""
    assert http(s.port, "GET", "/health")[0] == 200
    assert s.stop()[0] == 0


def test_device_memory_filled_from_outside_goes_with_the_server(world, serve):
    """The device-memory STAND-IN (hold_device_memory) and its filler (tests/vm/unified_memory_standin.py, VM case c):
    a served stand-in holds an empty memfd; another process fills it through copies of that fd, keeping none; the
    pages are the server's and the kernel frees them while the server ends: when its pidfd says it ended, they are
    gone, with nothing having to react to its death."""
    from tests.vm import unified_memory_standin as filler

    s = serve(eagle_args).wait_ready()
    # the server's fd (on this machine the lab's container hosts may run stand-ins of their own)
    pid, fd = filler.find_device_memory(standin.DEVICE_MEMORY, pids=[s.proc.pid])
    with pytest.raises(SystemExit):
        filler.find_device_memory(standin.DEVICE_MEMORY, pids=[os.getpid()])  # this process holds none

    def shmem_kib():
        return int(next(x for x in open("/proc/meminfo") if x.startswith("Shmem:")).split()[1])

    pidfd, before = os.pidfd_open(s.proc.pid), shmem_kib()
    for piece in range(8):  # 64 MiB
        assert filler.take(pidfd, fd, piece * filler.CHUNK)
    held = shmem_kib() - before
    assert held >= 60 * 1024, held  # the pages are taken, and held with no fd of this process open on them
    mine = []
    for n in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # listdir's own fd, closed by now
            mine.append(os.readlink(f"/proc/self/fd/{n}"))
    assert not [link for link in mine if standin.DEVICE_MEMORY in link], mine
    s.proc.kill()
    select.select([pidfd], [], [], 30)
    freed = before + held - shmem_kib()
    assert freed >= 60 * 1024, (held, freed)  # gone by the time the process had ended, not later
    assert not filler.take(pidfd, fd, 0)  # and there is nothing left to fill
    os.close(pidfd)


def test_local_dir_model_id_is_basename(world, serve):
    d = world.tmp / "models" / "My-Local-Ckpt"
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_text("w")
    s = serve(lambda w, port: [str(d) + "/", "--host", "127.0.0.1", "--port", str(port)]).wait_ready()
    assert http(s.port, "GET", "/v1/models")[1]["data"][0]["id"] == "My-Local-Ckpt"
    assert http(s.port, "POST", "/v1/completions", {"model": "My-Local-Ckpt", "prompt": "x"})[0] == 200
    assert s.stop()[0] == 0


def test_sigterm_while_loading_exits_promptly(world, serve):
    s = serve(eagle_args, delay=30)
    deadline = time.monotonic() + 5
    while "loading model" not in (line := s.proc.stdout.readline()):
        assert line and time.monotonic() < deadline
    rc, took, out = s.stop()
    assert rc == 0 and took < 1.0 and "stopped while loading" in out


def test_port_in_use_fails_before_loading(world, serve):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        s = serve(eagle_args, port=port, delay=30)
        s.proc.wait(timeout=5)
        rc, _, out = s.stop()
    assert rc == 1 and "already in use" in out and "loading model" not in out


def test_missing_behaviour_config_defaults(world):
    env = world.env(mode="crash")
    env["TRTLLM_STANDIN_CONFIG"] = str(world.tmp / "absent.json")
    shutil.rmtree(world.drafts["gpt-oss-120b-Eagle3"])  # so it exits before serving
    r = run_standin(eagle_args(world, free_port()), env)
    assert "absent (defaults): mode=ok load_delay_s=5.0" in r.stdout and r.returncode == 1


def test_invalid_behaviour_config(world):
    env = world.env()
    Path(env["TRTLLM_STANDIN_CONFIG"]).write_text('{"mode": "explode"}')
    r = run_standin(eagle_args(world, free_port()), env)
    assert r.returncode == 1 and "behaviour config" in r.stdout and "explode" in r.stdout


# ---------------------------------------------------------------- in-image config validation (STAND-IN tensorrt_llm)
PYLIB = Path(image.PYLIB_DIR)
# the script's arguments: the module and names 1.2.0rc6 defines (what validate_in_image.host_command passes)
IMPORTS = ["tensorrt_llm.llmapi.llm_args", "TorchLlmArgs", "update_llm_args_with_extra_dict"]


def run_validate_script(tmp_path, config_text, **env_over):
    """specfleet's in-image validation script, run with the local python3 against the STAND-IN tensorrt_llm
    package (PYTHONPATH), the config at the script's container path replaced by a temp file."""
    from specfleet.serving.validate import CONTAINER_CONFIG, SCRIPT

    cfg = tmp_path / "extra-llm-api-config.yml"
    cfg.write_text(config_text)
    assert SCRIPT.count(CONTAINER_CONFIG) == 1
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRTLLM_STANDIN_SERVE")}
    env.update(PYTHONPATH=str(PYLIB), **env_over)
    r = subprocess.run([sys.executable, "-c", SCRIPT.replace(CONTAINER_CONFIG, str(cfg)), *IMPORTS], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout.splitlines(), r.stderr


@pytest.mark.parametrize("config", [EAGLE_SEED, DT_SEED, {}], ids=["eagle", "draft_target", "empty"])
def test_validate_script_accepts_good_config(tmp_path, config):
    rc, out, err = run_validate_script(tmp_path, yaml.safe_dump(config))
    assert (rc, out) == (0, ["OK"]), err


@pytest.mark.parametrize("config,needle", [
    ("kv_cache_config: {free_gpu_memory_fractio: 0.9}\n", "kv_cache_config.free_gpu_memory_fractio: unknown key"),
    ("speculative_config: {decoding_type: Eagle, max_draft_len: 0, speculative_model_dir: /d}\n",
     "max_draft_len: must be > 0"),
    ("speculative_config: {decoding_type: Eagle3, max_draft_len: 3, speculative_model_dir: /d}\n",
     "invalid decoding type 'Eagle3'"),
    ("max_batch_size: '1'\n", "max_batch_size"),
    ("- a list\n", "must be a mapping"),
])
def test_validate_script_refuses_bad_config_in_one_line(tmp_path, config, needle):
    rc, out, err = run_validate_script(tmp_path, config)
    assert rc == 1 and len(out) == 1 and needle in out[0] and out[0] != "OK", (out, err)
    assert "STAND-IN" in out[0] or "mapping" in out[0]  # the stand-in's own validator answered


def test_validate_script_names_a_missing_tensorrt_llm(tmp_path):
    from specfleet.serving.validate import SCRIPT

    r = subprocess.run([sys.executable, "-c", SCRIPT, *IMPORTS], env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(tmp_path)},
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith("cannot import TensorRT-LLM's argument classes")


def test_standin_package_says_stand_in_and_uses_the_standin_validator():
    for path in PYLIB.rglob("*.py"):
        text = path.read_text()
        assert text.lstrip().startswith('"""STAND-IN') and "NOT TensorRT-LLM" in text, path
    assert "validate_extra_options" in (PYLIB / "tensorrt_llm/llmapi/llm_args.py").read_text()


# ---------------------------------------------------------------- image helpers (no mmdebstrap)
def test_variant_config_json_and_changes():
    cfg = json.loads(image.variant_config_json("never_healthy", 2, "1.2.0rc6"))
    assert cfg == {"mode": "never_healthy", "load_delay_s": 2.0, "version": "1.2.0rc6"}
    with pytest.raises(ValueError):
        image.variant_config_json("explode", 1, "x")
    ch = image.docker_import_changes()
    assert any(c.startswith("ENV PATH=") and "/usr/local/bin" in c for c in ch)
    args = image.mmdebstrap_args("amd64")
    assert "--format=tar" in args and "--include=python3-yaml" in args and "bookworm" in args
    assert image.base_recipe_key("amd64") == image.base_recipe_key("amd64") != image.base_recipe_key("arm64")
    pair = image.mmdebstrap_args("amd64", pair=True)  # a pair's base: OpenMPI, ssh, mpi4py; the others' unchanged
    assert "--include=python3-yaml,openmpi-bin,openssh-client,python3-mpi4py" in pair
    assert any("mpi4py" in a and "mpirun" in a for a in pair) and not any("mpi4py" in a for a in args)
    assert image.base_recipe_key("amd64", pair=True) != image.base_recipe_key("amd64")


def test_variant_assembly_appends_files_without_mmdebstrap(tmp_path, monkeypatch):
    """A fake base tar stands in for the mmdebstrap output: variants only append two members."""
    base = tmp_path / "base.tar"
    with tarfile.open(base, "w") as tf:
        for d in ("./", "./etc/", "./usr/", "./usr/local/", "./usr/local/bin/"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
    key = image.base_recipe_key()
    shutil.copy(base, tmp_path / (f"debian-{image.SUITE}-python3-yaml-{key[:16]}.tar"))

    def boom(*a, **k):
        raise AssertionError("mmdebstrap must not run for a variant")

    monkeypatch.setattr(image, "_run_mmdebstrap", boom)
    stale_old = tmp_path / "trtllm-standin-000000000000-ok-0000000000.tar"
    stale_recent = tmp_path / "trtllm-standin-111111111111-crash-0000000000.tar"
    stale_old.write_text("old")
    stale_recent.write_text("recent")
    os.utime(stale_old, (time.time() - 7200, time.time() - 7200))
    t0 = time.monotonic()
    ok = image.build_rootfs_tarball(tmp_path, "ok", 5.0)
    crash = image.build_rootfs_tarball(tmp_path, "crash", 0.5)
    assert time.monotonic() - t0 < 2
    assert ok != crash and image.build_rootfs_tarball(tmp_path, "ok", 5.0) == ok
    assert not stale_old.exists() and stale_recent.exists()  # stale variants pruned after an hour unused
    with tarfile.open(crash) as tf:
        names = tf.getnames()
        assert "./usr/local/bin/trtllm-serve" in names and "./etc/trtllm-standin.json" in names
        assert tf.getmember("./usr/local/bin/trtllm-serve").mode == 0o755
        assert tf.extractfile("./usr/local/bin/trtllm-serve").read() == SCRIPT.read_bytes()
        assert tf.getmember("./usr/local/bin/trtllm-llmapi-launch").mode == 0o755
        assert tf.extractfile("./usr/local/bin/trtllm-llmapi-launch").read() == image.LAUNCH_SCRIPT.read_bytes()
        assert json.loads(tf.extractfile("./etc/trtllm-standin.json").read())["mode"] == "crash"
        pkg = "./usr/lib/python3/dist-packages/tensorrt_llm"
        assert tf.getmember(pkg).isdir() and tf.getmember(pkg + "/llmapi").isdir()
        assert tf.extractfile(pkg + "/llmapi/llm_args.py").read() == (PYLIB / "tensorrt_llm/llmapi/llm_args.py").read_bytes()
        assert not [n for n in names if "__pycache__" in n]


# ---------------------------------------------------------------- slow: the real rootfs
@pytest.mark.slow
def test_real_rootfs_tarball(tmp_path):
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap not installed")
    t0 = time.monotonic()
    base = image.build_base_tarball(cache_dir())  # the lab's base (a cold cache builds it), the session's too
    base_s = time.monotonic() - t0
    cache = tmp_path / "cache"  # the variants beside a copy of it: none left in the lab's cache
    cache.mkdir()
    shutil.copyfile(base, cache / base.name)
    tar = image.build_rootfs_tarball(cache, mode="ok", load_delay_s=0.3)
    t0 = time.monotonic()
    assert image.build_rootfs_tarball(cache, mode="ok", load_delay_s=0.3) == tar
    cached_s = time.monotonic() - t0
    t0 = time.monotonic()
    crash = image.build_rootfs_tarball(cache, mode="crash", load_delay_s=0.3)
    variant_s = time.monotonic() - t0
    size_mib = tar.stat().st_size / 2**20
    print(f"\nstand-in rootfs: {tar.name} {size_mib:.1f} MiB; base built unless cached {base_s:.1f} s, "
          f"cached {cached_s:.3f} s, variant {variant_s:.2f} s")
    assert cached_s < 1 and variant_s < 10 and size_mib < 200

    listing = subprocess.run(["tar", "-tvf", str(tar)], check=True, capture_output=True, text=True).stdout
    names = {line.split()[5].removesuffix("/") for line in listing.splitlines()}
    assert "./usr/bin/python3" in names and "./usr/local/bin/trtllm-serve" in names
    assert "./etc/trtllm-standin.json" in names
    line = next(x for x in listing.splitlines() if x.split()[5] == "./usr/local/bin/trtllm-serve")
    assert line.startswith("-rwxr-xr-x")
    assert not any(x.split()[5].startswith("./dev/") for x in listing.splitlines())

    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    if os.geteuid() != 0 or not os.path.exists(chroot):
        pytest.skip("extracting and chrooting needs root and chroot(8)")
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["tar", "-C", str(root), "-xf", str(tar)], check=True)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([chroot, str(root), "/usr/local/bin/trtllm-serve", "--help"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "STAND-IN" in r.stdout
    r = subprocess.run([chroot, str(root), "python3", "-c", "import yaml, http.server, json; print('ok')"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "ok", r.stderr
    # specfleet's in-image validation entry point, as the release step runs it in the container
    from specfleet.serving.validate import CONTAINER_CONFIG, SCRIPT
    (root / CONTAINER_CONFIG.lstrip("/")).write_text(yaml.safe_dump(DT_SEED))
    r = subprocess.run([chroot, str(root), "python3", "-c", SCRIPT, *IMPORTS], env=env, capture_output=True, text=True, timeout=30)
    assert r.stdout.splitlines()[-1:] == ["OK"], (r.stdout, r.stderr)
    (root / CONTAINER_CONFIG.lstrip("/")).write_text("kv_cache_config: {bogus: 1}\n")
    r = subprocess.run([chroot, str(root), "python3", "-c", SCRIPT, *IMPORTS], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "kv_cache_config.bogus" in r.stdout.splitlines()[-1]

    # full start-up inside the chroot against a fake cache at the container's default location
    _fake_hf_model(root / "root/.cache/huggingface/hub", DT_MODEL, ["model.safetensors"], "c" * 40)
    port = free_port()
    proc = subprocess.Popen([chroot, str(root), "trtllm-serve", DT_MODEL, "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 20
        while connect_refused(port):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.1)
        assert http(port, "GET", "/health")[0] == 200
        assert http(port, "GET", "/version")[1] == {"version": "1.2.0rc6-standin"}
        st, c = http(port, "POST", "/v1/completions", {"model": DT_MODEL, "prompt": "x", "max_tokens": 7})
        assert st == 200 and "max_tokens=7" in c["choices"][0]["text"]
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=5)
        proc.stdout.close()
    assert rc == 0
    # the crash variant differs only in its baked config
    with tarfile.open(crash) as tf:
        assert json.loads(tf.extractfile("./etc/trtllm-standin.json").read())["mode"] == "crash"


# ---------------------------------------------------------------- SYNTHETIC speculative-decoding model
def _spec_yaml(world, name, decoding="Eagle", k=3, iter_stats=True):
    data = dict(EAGLE_SEED, enable_iter_perf_stats=iter_stats)
    data["speculative_config"] = dict(EAGLE_SEED["speculative_config"], decoding_type=decoding, max_draft_len=k,
                                      speculative_model_dir=str(world.drafts["gpt-oss-120b-Eagle3"]) + "/")
    return write_yaml(world.tmp / name, data)


def _stream(port, body, timeout=30):
    """POST a streamed completion; returns (chunks as dicts, arrival times relative to the request, total)."""
    import http.client as httpclient
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    chunks, times, done = [], [], False
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        if line == "data: [DONE]":
            done = True
            break
        chunks.append(json.loads(line[5:]))
        times.append(time.perf_counter() - t0)
    conn.close()
    assert done, "the stream ends with data: [DONE]"
    return chunks, times, time.perf_counter() - t0


def test_expected_acceptance_length_formula():
    assert standin.expected_acceptance_length([1.0], 4) == 5.0
    assert standin.expected_acceptance_length([0.0], 4) == 1.0
    assert abs(standin.expected_acceptance_length([0.8, 0.5], 3) - (1 + 0.8 + 0.4 + 0.2)) < 1e-12  # last p repeats


def test_speculation_iteration_stats_timing_and_stream(world, serve):
    """Acceptance [1, 1, 0] with k=3: every generation iteration accepts exactly 2 drafts and emits 3 tokens."""
    perf = {"target_step_ms": 20.0, "prefill_ms_per_token": 1.0, "seed": 7,
            "speculation": {"Eagle": {"acceptance": [1.0, 1.0, 0.0], "draft_step_ms": 5.0}}}
    yml = _spec_yaml(world, "k3.yaml", k=3)
    s = serve(lambda w, port: eagle_args(w, port)[:-1] + [str(yml)], perf=perf).wait_ready()
    prompt = " ".join(["word"] * 50)  # 50 prompt tokens: context iteration = 20 + 50 * 1.0 = 70 ms
    chunks, times, total = _stream(s.port, {"prompt": prompt, "max_tokens": 31, "ignore_eos": True})
    texts = [c["choices"][0]["text"] for c in chunks if c["choices"][0]["text"]]
    assert len(texts) == 11, "1 context iteration (1 token) + 10 iterations of 3 tokens = 31 tokens"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 31
    assert "STAND-IN" in texts[0]
    modelled = 0.070 + 10 * (0.020 + 3 * 0.005)  # 0.42 s
    assert 0.065 <= times[0] < 0.070 + 0.25, times[0]  # TTFT = the context iteration
    assert modelled - 0.01 <= total < modelled + 0.4, total
    # the same request without streaming gives the same text (deterministic) and the same pacing
    t0 = time.perf_counter()
    st, c = http(s.port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 31, "ignore_eos": True})
    assert st == 200 and c["choices"][0]["text"] == "".join(texts) and time.perf_counter() - t0 >= modelled - 0.01
    st, metrics = http(s.port, "GET", "/metrics")
    assert st == 200 and len(metrics) == 22  # 11 iterations per request, 2 requests
    for key in ("iter", "iterLatencyMS", "numActiveRequests", "numQueuedRequests", "numCompletedRequests",
                "gpuMemUsage", "timestamp", "inflightBatchingStats", "specDecodingStats"):
        assert key in metrics[0], key
    ctx, gen = metrics[0], metrics[1]
    assert ctx["inflightBatchingStats"]["numCtxTokens"] == 50 and ctx["iterLatencyMS"] == 70.0
    assert ctx["specDecodingStats"]["numRequestsWithDraftTokens"] == 0
    assert gen["specDecodingStats"] == {"numDraftTokens": 3, "numAcceptedTokens": 2, "numRequestsWithDraftTokens": 1,
                                        "acceptanceLength": 3.0, "iterLatencyMS": 35.0, "draftOverhead": 0.0}
    assert [m["iter"] for m in metrics] == list(range(1, 23))
    assert http(s.port, "GET", "/metrics") == (200, [])  # drained on read
    out = s.stop()[2]
    assert "SYNTHETIC Eagle speculation: k=3" in out and "iteration stats at /metrics: on" in out


def test_speculation_acceptance_follows_probabilities(world, serve):
    """Per-position probabilities [0.7, 0.5] with k=2: mean accepted per iteration ~ 0.7 + 0.35 (seeded, so exact
    run to run); DraftTarget reports its draft overhead; natural stop at 32 tokens without ignore_eos."""
    perf = {"target_step_ms": 0.0, "prefill_ms_per_token": 0.0,
            "speculation": {"DraftTarget": {"acceptance": [0.7, 0.5], "draft_step_ms": 0.0}}}
    data = dict(DT_SEED, enable_iter_perf_stats=True, iter_stats_max_iterations=10000)  # default keeps 1000
    data["speculative_config"] = dict(DT_SEED["speculative_config"], max_draft_len=2,
                                      speculative_model_dir=str(world.drafts["Llama-3.1-8B-Instruct-FP4"]) + "/")
    yml = write_yaml(world.tmp / "dt2.yaml", data)
    s = serve(lambda w, port: dt_args(w, port)[:-1] + [str(yml)], perf=perf).wait_ready()
    st, c = http(s.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 100})
    assert c["usage"]["completion_tokens"] == 32 and c["choices"][0]["finish_reason"] == "stop"
    for i in range(40):
        http(s.port, "POST", "/v1/completions", {"prompt": f"prompt {i:d}", "max_tokens": 200, "ignore_eos": True})
    gens = [m["specDecodingStats"] for m in http(s.port, "GET", "/metrics")[1] if m["specDecodingStats"]["numDraftTokens"]]
    mean_acc = sum(g["numAcceptedTokens"] for g in gens) / len(gens)
    assert len(gens) > 2000 and abs(mean_acc - 1.05) < 0.06, (len(gens), mean_acc)
    first = sum(g["numAcceptedTokens"] >= 1 for g in gens) / len(gens)
    assert abs(first - 0.7) < 0.04, first  # P(first draft accepted)
    assert all(g["draftOverhead"] == 0.0 for g in gens)  # 0 ms drafts here


def test_queue_beyond_max_batch_size_and_stats_off(world, serve):
    """max_batch_size 1 (the playbook's): a second request waits; no iteration stats without the option."""
    perf = {"target_step_ms": 10.0, "prefill_ms_per_token": 0.0}
    data = {k: v for k, v in EAGLE_SEED.items() if k != "speculative_config"}  # one token per iteration
    yml = write_yaml(world.tmp / "nostats.yaml", dict(data, enable_iter_perf_stats=False))
    s = serve(lambda w, port: eagle_args(w, port)[:-1] + [str(yml)], perf=perf).wait_ready()
    # Ordering, not a race: the first request is admitted (its first SSE chunk has arrived) before the second is
    # sent, and the second is sent (checked) while the first still has >= 99 iterations of >= 10 ms to go. Queued,
    # the second then finishes at least its own 100 iterations after the first; run alongside, about one iteration
    # after it.
    import http.client as httpclient
    import threading
    body = {"prompt": "q", "max_tokens": 100, "ignore_eos": True}
    first = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{s.port:d}/v1/completions", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps(dict(body, stream=True)).encode()), timeout=60)
    assert first.readline().startswith(b"data: ")
    done = {}
    sent = threading.Event()

    def second():
        conn = httpclient.HTTPConnection("127.0.0.1", s.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        done["sent"] = time.monotonic()
        sent.set()
        conn.getresponse().read()
        done["second"] = time.monotonic()

    t = threading.Thread(target=second)
    t.start()
    assert sent.wait(30)
    first.read()
    done["first"] = time.monotonic()
    t.join()
    assert done["sent"] < done["first"], done  # the precondition: both were in the server at once
    assert done["second"] - done["first"] >= 0.9 * 100 * 0.010, done  # served one after the other
    assert http(s.port, "GET", "/metrics") == (200, [])


@pytest.mark.parametrize("perf, needle", [
    ({"target_step_ms": -1}, "target_step_ms must be a number >= 0"),
    ({"speculation": {"Eagle": {"acceptance": [1.5]}}}, "acceptance must be a non-empty list of probabilities"),
    ({"speculation": {"Eagle": {"typo": 1}}}, "speculation.Eagle must be an object"),
    ({"seed": "x"}, "seed must be an integer"),
])
def test_invalid_speculation_behaviour(world, perf, needle):
    r = run_standin(eagle_args(world, free_port()), world.env(perf=perf))
    assert r.returncode == 1 and needle in r.stdout, r.stdout


# ---------------------------------------------------------------- versions (the contract table's, tests/contract)
def _dt_yaml_13(world):
    spec = {"decoding_type": "Draft_Target", "max_draft_len": 4,
            "speculative_model": str(world.drafts["Llama-3.1-8B-Instruct-FP4"]) + "/"}
    return write_yaml(world.tmp / "dt13.yaml", dict(DT_SEED, speculative_config=spec))


def test_1_3_serves_its_own_names_with_config_flag(world, serve):
    yml = _dt_yaml_13(world)
    args = lambda w, port: [a if a != "--extra_llm_api_options" else "--config" for a in dt_args(w, port)[:-1]] + [str(yml)]
    s = serve(args, version="1.3.0rc12").wait_ready()
    assert http(s.port, "GET", "/version") == (200, {"version": "1.3.0rc12-standin"})


def test_1_3_refuses_1_2_names(world):
    r = run_standin(dt_args(world, free_port()), world.env(delay=0, version="1.3.0rc12"))
    assert r.returncode == 1 and "speculative_config.decoding_type: invalid decoding type 'DraftTarget'" in r.stdout, r.stdout


def test_1_2_has_no_config_flag_and_unknown_versions_are_one_line(world):
    yml = _dt_yaml_13(world)
    r = run_standin([DT_MODEL, "--port", str(free_port()), "--config", str(world.dt_yaml)], world.env(delay=0))
    assert r.returncode == 1 and "no such option: --config (trtllm-serve 1.2.0rc6 takes --extra_llm_api_options" \
        in r.stdout, r.stdout
    r = run_standin(dt_args(world, free_port())[:-1] + [str(yml)], world.env(delay=0))
    assert r.returncode == 1 and "invalid decoding type 'Draft_Target'" in r.stdout, r.stdout
    r = run_standin(dt_args(world, free_port()), world.env(delay=0, version="9.9.9"))
    assert r.returncode == 1 and "stand-in version 9.9.9 is not in the contract table" in r.stdout
    assert "Traceback" not in r.stdout + r.stderr
