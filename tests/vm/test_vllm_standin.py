"""The vLLM STAND-IN (tests/vm/vllm_standin/vllm_serve.py), run as a subprocess on the controller against a fake
Hugging Face cache in tmp_path: it takes what specfleet renders for every vLLM profile, refuses what vLLM 0.20.1
refuses, serves only with the model files in place, and its counters move with the tokens it serves."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specfleet.engines.command import container_command, memory_flag
from specfleet.engines.vllm_contract import COUNTERS
from specfleet.fleet.profiles import profiles
from specfleet.overview.host.overview import acceptance_from_counters, counter_sums
from tests.unit.test_quoting import _settings
from tests.vm.standin_common.standin_credentials import CREDENTIALS_SEEN

SCRIPT = Path(__file__).parent / "vllm_standin" / "vllm_serve.py"
#: A DGX Spark's MemTotal as DGX OS reports it: 121.69 GiB of its 128 GB.
GB10_MEMTOTAL_KB = 127_600_717
GPT_OSS = {"model_type": "gpt_oss", "vocab_size": 201088}
LLAMA = {"model_type": "llama", "vocab_size": 128256}


def _snapshot(hub: Path, repo: str, config: dict) -> Path:
    commit = "c" * 40
    base = hub / ("models--" + repo.replace("/", "--"))
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(commit)
    (snap / "config.json").write_text(json.dumps(config))
    (snap / "model.safetensors").write_text("weights")
    return snap


@pytest.fixture
def world(tmp_path):
    hub = tmp_path / "hf" / "hub"
    _snapshot(hub, "openai/gpt-oss-120b", GPT_OSS)
    _snapshot(hub, "nvidia/Llama-3.3-70B-Instruct-FP4", LLAMA)
    drafts = {}
    for name, cfg in (("eagle3", {"model_type": "llama", "vocab_size": 201088}), ("llama8b", LLAMA),
                      ("qwen", {"model_type": "qwen2", "vocab_size": 151936})):
        d = drafts[name] = tmp_path / "drafts" / name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "model.safetensors").write_text("weights")
    tik = tmp_path / "tiktoken"
    tik.mkdir()
    (tik / "o200k_base.tiktoken").write_text("enc")
    meminfo = spark_meminfo(tmp_path / "meminfo")
    behaviour = tmp_path / "behaviour.json"
    behaviour.write_text(json.dumps({"step_ms": 1, "acceptance": {"eagle3": [1, 1, 0.5], "ngram": [0.6, 0.3]},
                                     "meminfo": str(meminfo)}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "TIKTOKEN_ENCODINGS_BASE": str(tik),
           "VLLM_STANDIN_BEHAVIOUR": str(behaviour)}
    return {"env": env, "drafts": drafts, "tmp": tmp_path, "meminfo": meminfo}


def spark_meminfo(path: Path) -> Path:
    """A Spark's /proc/meminfo with 4 GiB in use, for the stand-in's start-up memory check (its behaviour's
    `meminfo`): every stand-in run on the controller reads this, never the controller's own memory."""
    _meminfo(path, GB10_MEMTOTAL_KB, GB10_MEMTOTAL_KB - 4 * (1 << 20))
    return path


def _meminfo(path: Path, total_kb: int, available_kb: int) -> None:
    path.write_text(f"MemTotal:       {total_kb} kB\nMemFree:        {available_kb} kB\n"
                    f"MemAvailable:   {available_kb} kB\n")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(world, argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *argv], env=world["env"], capture_output=True, text=True,
                          timeout=30)


class Served:
    def __init__(self, world, argv: list[str]):
        behaviour = Path(world["env"].get("VLLM_STANDIN_BEHAVIOUR", "/nonexistent"))
        assert behaviour.is_file() and "meminfo" in json.loads(behaviour.read_text()), \
            "a vLLM stand-in on the controller reads a Spark's meminfo (spark_meminfo), never this machine's"
        self.port = _port()
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *argv, "--port", str(self.port)], env=world["env"],
                                     stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("the stand-in did not come up")

    def get(self, path: str) -> bytes:
        return urllib.request.urlopen(self.url + path, timeout=10).read()

    def post(self, path: str, body: dict) -> bytes:
        req = urllib.request.Request(self.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return urllib.request.urlopen(req, timeout=30).read()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _specfleets_argv(profile: str, world, monkeypatch) -> list[str]:
    """What specfleet's unit runs in the container for `profile`, with the container's paths made this machine's
    (the draft's mount point -> a draft directory here)."""
    monkeypatch.setenv("HF_TOKEN", "hf_standin_test_token")
    s = _settings(profile)
    cmd = container_command(s)[1:]  # after `vllm`
    spec_i = cmd.index("--speculative-config") + 1 if "--speculative-config" in cmd else None
    if spec_i:
        spec = json.loads(cmd[spec_i])
        if "model" in spec:
            spec["model"] = str(world["drafts"]["eagle3" if "eagle3" in profile else "llama8b"])
        cmd[spec_i] = json.dumps(spec)
    port_i = cmd.index("--port")
    del cmd[port_i:port_i + 2]
    return [*cmd, memory_flag(s)]  # the unit appends the share (serving/render.py)


@pytest.mark.parametrize("profile", sorted(p for p in profiles() if p.startswith("vllm_")))
def test_it_serves_what_specfleet_renders_for_each_vllm_profile_under_the_repo_id(world, profile, monkeypatch):
    srv = Served(world, _specfleets_argv(profile, world, monkeypatch))
    try:
        model = profiles()[profile]["target"]["repo"]
        assert [m["id"] for m in json.loads(srv.get("/v1/models"))["data"]] == [model]
        out = json.loads(srv.post("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 12}))
        assert out["usage"]["completion_tokens"] == 12 and len(out["choices"][0]["text"].split()) == 12
    finally:
        srv.close()


def test_without_served_model_name_vllm_names_the_model_by_its_snapshot_path(world):
    srv = Served(world, ["serve", "openai/gpt-oss-120b", "--host", "127.0.0.1"])
    try:
        [name] = [m["id"] for m in json.loads(srv.get("/v1/models"))["data"]]
        assert name.endswith("/snapshots/" + "c" * 40) and name.startswith(str(world["tmp"]))
    finally:
        srv.close()


def test_its_counters_move_with_the_tokens_it_streams(world):
    argv = ["serve", "openai/gpt-oss-120b", "--served-model-name", "openai/gpt-oss-120b", "--host", "127.0.0.1",
            "--speculative-config", json.dumps({"method": "eagle3", "model": str(world["drafts"]["eagle3"]),
                                                "num_speculative_tokens": 3})]
    srv = Served(world, argv)
    try:
        before = counter_sums(srv.get("/metrics").decode(), COUNTERS)
        raw = srv.post("/v1/chat/completions", {"model": "openai/gpt-oss-120b", "stream": True, "max_tokens": 60,
                                                "messages": [{"role": "user", "content": "hi"}]}).decode()
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
        text = "".join(c["delta"]["content"] for e in events for c in e["choices"])
        assert len(text.split()) == 60 and raw.rstrip().endswith("data: [DONE]")
        metrics = srv.get("/metrics").decode()
        after = counter_sums(metrics, COUNTERS)
        acc = acceptance_from_counters(before, after, COUNTERS)
        steps = len([e for e in events if e["choices"]])
        # each streamed chunk is one engine step: 1 + its accepted tokens; [1, 1, 0.5]: 2 or 3 accepted per step
        assert acc["drafts"] == steps and acc["draft_tokens"] == 3 * steps
        assert acc["accepted_tokens"] + steps >= 60 and 3.0 <= acc["acceptance_length"] <= 4.0
        assert 'vllm:generation_tokens_total{engine="0",model_name="openai/gpt-oss-120b"} 60.0' in metrics
        assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="openai/gpt-oss-120b",' \
               f'position="0"}} {steps}.0' in metrics
    finally:
        srv.close()



@pytest.mark.parametrize("disabled", ["", "true"])
def test_its_metrics_carry_what_prometheus_client_adds_to_vllms(world, disabled):
    """With one API server vLLM serves prometheus_client's default registry (vllm/v1/metrics/prometheus.py:39-52 at
    v0.20.1): beside each counter's `_total` a `_created` sample per label set, stamped when the stat logger made it
    (none with PROMETHEUS_DISABLE_CREATED_SERIES), and the process collector's process_start_time_seconds."""
    argv = ["serve", "openai/gpt-oss-120b", "--served-model-name", "m", "--host", "127.0.0.1",
            "--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 2})]
    world["env"]["PROMETHEUS_DISABLE_CREATED_SERIES"] = disabled
    t0 = time.time()
    srv = Served(world, argv)
    try:
        first = srv.get("/metrics").decode()
        srv.post("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 5})
        text = srv.get("/metrics").decode()
        lines = text.splitlines()
        with open(f"/proc/{srv.proc.pid}/stat", "rb") as fh:  # as prometheus_client reads its own
            ticks = float(fh.read().split(b")")[-1].split()[19])
        with open("/proc/stat", "rb") as fh:
            btime = next(float(line.split()[1]) for line in fh if line.startswith(b"btime "))
        assert f"process_start_time_seconds {ticks / os.sysconf('SC_CLK_TCK') + btime!r}" in lines
        created = [line for line in lines if line.split("{", 1)[0].endswith("_created")]
        if disabled:
            assert not created and "_created" not in text
            return
        totals = [line.split(" ")[0].replace("_total{", "{") for line in lines
                  if line.split("{", 1)[0].endswith("_total")]
        assert sorted(line.split(" ")[0].replace("_created{", "{") for line in created) == sorted(totals)
        assert "# TYPE vllm:spec_decode_num_drafts_created gauge" in lines
        assert all(t0 <= float(line.split(" ")[1]) <= time.time() for line in created)
        # made once when the server started: the same in every read
        assert created == [line for line in first.splitlines() if line.split("{", 1)[0].endswith("_created")]
    finally:
        srv.close()

def test_without_speculation_it_exposes_no_spec_decode_series(world):
    srv = Served(world, ["serve", "openai/gpt-oss-120b", "--served-model-name", "m", "--host", "127.0.0.1"])
    try:
        srv.post("/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 5})
        metrics = srv.get("/metrics").decode()
        assert "spec_decode" not in metrics and 'vllm:generation_tokens_total{engine="0",model_name="m"} 5.0' in metrics
    finally:
        srv.close()


def test_it_logs_the_names_of_the_credential_headers_it_receives_never_their_values(world):
    srv = Served(world, ["serve", "openai/gpt-oss-120b", "--served-model-name", "m", "--host", "127.0.0.1"])
    secret = "sk-not-for-the-journal-0123456789"
    try:
        srv.get("/metrics")  # no credential: nothing logged
        urllib.request.urlopen(urllib.request.Request(srv.url + "/metrics", headers={
            "Authorization": f"Bearer {secret}", "X-Api-Key": secret, "Cookie": f"s={secret}"}), timeout=10).read()
        req = urllib.request.Request(srv.url + "/v1/completions", json.dumps({"model": "m", "prompt": "x",
                                     "max_tokens": 2}).encode(), {"Content-Type": "application/json",
                                                                  "api-key": secret})
        urllib.request.urlopen(req, timeout=30).read()
    finally:
        srv.close()
    err = srv.proc.stderr.read()
    seen = [line.split("] ", 1)[1] for line in err.splitlines() if CREDENTIALS_SEEN in line]
    assert seen == [f"{CREDENTIALS_SEEN}: authorization, cookie, x-api-key (values not logged) on GET /metrics",
                    f"{CREDENTIALS_SEEN}: api-key (values not logged) on POST /v1/completions"], err
    assert secret not in err


@pytest.mark.parametrize("extra, needle", [
    (["--disable-log-requests"], "unrecognized arguments: --disable-log-requests"),
    (["--kv-cache-dtype", "fp9"], "argument --kv-cache-dtype: invalid choice: 'fp9'"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization: Input should be greater than 0 and less than"),
    (["--speculative-config", '{"method":"eagle4","model":"/x","num_speculative_tokens":3}'],
     "method: Input should be one of"),
    (["--speculative-config", '{"method":"ngram","num_speculative_tokens":-1}'],
     "num_speculative_tokens: Input should be greater than 0"),
    (["--speculative-config", '{"method":"eagle3","num_speculative_tokens":3}'],
     "num_speculative_tokens was provided but without speculative model."),
    (["--speculative-config", '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":5,'
                              '"prompt_lookup_max":2}'], "prompt_lookup_min=5 must be <= prompt_lookup_max=2"),
    (["--speculative-config", '{"method":"ngram","num_speculative_tokens":3,"tensor_parallel_size":1}'],
     "'tensor_parallel_size' is not a valid argument in the speculative_config"),
    (["--speculative-config", '{"method":"ngram","num_speculative_tokens":3,"bogus":1}'],
     "bogus: Extra inputs are not permitted"),
])
def test_it_refuses_what_vllm_refuses(world, extra, needle):
    r = _run(world, ["serve", "openai/gpt-oss-120b", *extra])
    assert r.returncode in (1, 2) and needle in r.stderr, r.stderr


@pytest.mark.parametrize("free_gib, share, starts", [(100, 0.8, True), (97, 0.8, False), (110, 0.94, False)])
def test_it_refuses_a_memory_share_above_what_is_free_at_start_up(world, free_gib, share, starts):
    """vLLM 0.20.1 asks ceil(MemTotal * share) of a unified-memory GPU and refuses when MemAvailable is less: 0.8 of
    a Spark's 121.69 GiB is 97.35 GiB."""
    _meminfo(world["meminfo"], GB10_MEMTOTAL_KB, free_gib << 20)
    if starts:
        srv = Served(world, ["serve", "openai/gpt-oss-120b", f"--gpu-memory-utilization={share}"])
        srv.close()
        return
    r = _run(world, ["serve", "openai/gpt-oss-120b", f"--gpu-memory-utilization={share}"])
    assert r.returncode == 1, r.stderr
    assert f"Free memory on device cuda:0 ({free_gib}.0/121.69 GiB) on startup is less than desired GPU memory " \
           f"utilization ({share}," in r.stderr, r.stderr


def test_it_refuses_a_draft_model_of_another_vocabulary_and_eagle3_on_a_target_vllm_does_not_list(world):
    qwen = str(world["drafts"]["qwen"])
    r = _run(world, ["serve", "nvidia/Llama-3.3-70B-Instruct-FP4", "--speculative-config",
                     json.dumps({"method": "draft_model", "model": qwen, "num_speculative_tokens": 4})])
    assert r.returncode == 1 and "Target and draft model should have the same vocabulary size" in r.stderr
    _snapshot(Path(world["env"]["HF_HOME"]) / "hub", "acme/phi-x", {"model_type": "phi3", "vocab_size": 1})
    r = _run(world, ["serve", "acme/phi-x", "--speculative-config",
                     json.dumps({"method": "eagle3", "model": qwen, "num_speculative_tokens": 4})])
    assert r.returncode == 1 and "Eagle3 is only supported for" in r.stderr, r.stderr


@pytest.mark.parametrize("what", ["target", "draft", "tiktoken"])
def test_it_serves_only_when_the_model_files_are_where_they_should_be(world, what):
    argv = ["serve", "openai/gpt-oss-120b", "--speculative-config",
            json.dumps({"method": "eagle3", "model": str(world["drafts"]["eagle3"]), "num_speculative_tokens": 3})]
    if what == "target":
        hub = Path(world["env"]["HF_HOME"]) / "hub" / "models--openai--gpt-oss-120b"
        next(hub.glob("snapshots/*/model.safetensors")).unlink()
    elif what == "draft":
        (world["drafts"]["eagle3"] / "config.json").unlink()
    else:
        (world["tmp"] / "tiktoken" / "o200k_base.tiktoken").unlink()
    r = _run(world, argv)
    assert r.returncode == 1 and {"target": "no config.json and *.safetensors", "draft": "no config.json",
                                  "tiktoken": "HarmonyError"}[what] in r.stderr, r.stderr


# ---- the in-image check of `vllm serve` arguments (specfleet/engines/host/validate_vllm_args.py) on the STAND-IN vllm
# package the lab's image carries (tests/vm/vllm_standin/pylib)
def _check(argv: list[str]) -> subprocess.CompletedProcess:
    from specfleet.engines.check import VLLM_SCRIPT
    from specfleet.engines.vllm_contract import CONTRACT

    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parent / "pylib"), "VLLM_STANDIN_SCRIPT": str(SCRIPT)}
    return subprocess.run([sys.executable, "-c", VLLM_SCRIPT, *CONTRACT.validator, "--", *argv], env=env,
                          capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("profile", sorted(p for p in profiles() if p.startswith("vllm_")))
def test_the_in_image_check_accepts_what_specfleet_renders(profile, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_standin_test_token")
    r = _check(container_command(_settings(profile))[2:])
    assert (r.returncode, r.stdout.splitlines()[-1:]) == (0, ["OK"]), r.stdout + r.stderr


@pytest.mark.parametrize("argv, line", [
    (["m", "--disable-log-requests"], "ValueError: unrecognized arguments: --disable-log-requests"),
    (["m", "--max-num-seqs", "four"], "ValueError: argument --max-num-seqs: invalid int value: 'four'"),
    (["m", "--speculative-config", "{method: ngram}"], "ValueError: argument --speculative-config: invalid loads value"),
])
def test_the_in_image_check_refuses_in_one_line(argv, line):
    r = _check(argv)
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith(line), r.stdout + r.stderr


def test_a_request_without_a_model_is_the_served_models_and_another_model_is_not_found(world):
    """vLLM's OpenAI server takes a request that names no model as its served model's (the gateway's
    /models/<model>/v1/... route forwards such bodies); a model it does not serve is a 404."""
    srv = Served(world, ["serve", "openai/gpt-oss-120b", "--served-model-name", "openai/gpt-oss-120b",
                         "--host", "127.0.0.1"])
    try:
        out = json.loads(srv.post("/v1/completions", {"prompt": "hello", "max_tokens": 3}))
        assert out["model"] == "openai/gpt-oss-120b" and out["usage"]["completion_tokens"] == 3, out
        with pytest.raises(urllib.error.HTTPError) as err:
            srv.post("/v1/completions", {"model": "other/model", "prompt": "hello", "max_tokens": 3})
        assert err.value.code == 404
    finally:
        srv.close()
