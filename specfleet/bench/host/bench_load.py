#!/usr/bin/env python3
"""specfleet-bench-load: the load client `specfleet bench` runs ON a host against its loopback-bound trtllm-serve.

Python 3 standard library only (the hosts have python3; trtllm-serve binds 127.0.0.1, so the load must start on
the host). Reads one JSON spec on stdin, prints one JSON result on stdout:

  spec:   {"url": "http://127.0.0.1:8000", "model": "...", "buckets": {"short": [prompt, ...], ...},
           "requests": N, "concurrency": C, "warmup": W, "max_tokens": M, "temperature": T,
           "metrics": true, "counters": {"format", "path", "names"}, "poll_s": 0.5, "timeout_s": 600}
  result: {"env": {...}, "buckets": {"short": {"requests": [{"ttft_s", "e2e_s", "itl_s": [...],
           "output_tokens", "prompt_tokens", "error"}], "wall_s", "iterations": [...], "mem_peak": {...},
           "counters": {"names", "before", "after"}}}}

An engine that counts acceptance in Prometheus counters (`counters.format` "prometheus": vLLM) is read once before the
measured requests and once after them: the lines of the named counters, as the server exposed them (the controller
sums and subtracts them, overview/host/overview.py); nothing is drained. Otherwise /metrics is drained as below.

Per bucket: W warm-up requests (not measured), then /metrics is drained (and discarded: those iterations belong
to the warm-up), then N requests run with C in flight while a thread drains /metrics every poll_s seconds (the
queue is emptied on read and bounded on the server, so it must be read during the run) and samples memory in
use; a final drain after the last request. Every request streams (`stream: true`, `ignore_eos: true` so each
produces exactly max_tokens): TTFT is the arrival of the first chunk with text, the inter-token latencies are
the gaps between later chunks (one chunk per engine iteration: with speculation a chunk carries several tokens),
and the output token count is the server's `usage.completion_tokens`.
"""

from __future__ import annotations

import http.client
import json
import platform
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def _conn(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout), u.path.rstrip("/")


def stream_completion(url: str, model: str, prompt: str, max_tokens: int, temperature: float,
                      timeout: float = 600.0) -> dict:
    """One streamed /v1/completions request: TTFT, chunk gaps, e2e latency, output tokens."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                       "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}})
    out = {"ttft_s": None, "e2e_s": None, "itl_s": [], "output_tokens": 0, "prompt_tokens": None, "error": None}
    conn, base = _conn(url, timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", base + "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:300].decode('utf-8', 'replace')}"
            return out
        last = None
        chunks_text = 0
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            now = time.perf_counter()
            chunk = json.loads(data)
            usage = chunk.get("usage")
            if usage:
                out["output_tokens"] = usage.get("completion_tokens") or out["output_tokens"]
                out["prompt_tokens"] = usage.get("prompt_tokens")
            text = "".join((c.get("text") or (c.get("delta") or {}).get("content") or "")
                           for c in chunk.get("choices") or [])
            if not text:
                continue
            chunks_text += 1
            if last is None:
                out["ttft_s"] = now - start
            else:
                out["itl_s"].append(now - last)
            last = now
        out["e2e_s"] = time.perf_counter() - start
        if not out["output_tokens"]:
            out["output_tokens"] = chunks_text  # no usage in the stream: count chunks (a lower bound)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return out


def drain_metrics(url: str, timeout: float = 10.0) -> list:
    """GET /metrics: TensorRT-LLM's iteration stats (a JSON list), removed from the server's queue by this read."""
    conn, base = _conn(url, timeout)
    try:
        conn.request("GET", base + "/metrics")
        resp = conn.getresponse()
        payload = resp.read()
        if resp.status != 200:
            return []
        data = json.loads(payload or b"[]")
        return data if isinstance(data, list) else []
    except (OSError, ValueError, http.client.HTTPException):
        return []
    finally:
        conn.close()


def counter_lines(url: str, path: str, names: list, timeout: float = 10.0) -> list:
    """The exposition lines of the named counters (a read that consumes nothing); [] when unreadable."""
    conn, base = _conn(url, timeout)
    try:
        conn.request("GET", base + path)
        resp = conn.getresponse()
        payload = resp.read()
        if resp.status != 200:
            return []
        return [line for line in payload.decode("utf-8", "replace").splitlines()
                if line.split("{", 1)[0].split(" ", 1)[0] in names]
    except (OSError, http.client.HTTPException):
        return []
    finally:
        conn.close()


def memory_in_use() -> dict:
    """{"gpu_bytes": ... (nvidia-smi, when present), "host_bytes": MemTotal - MemAvailable}."""
    out: dict = {}
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=10)
            vals = [int(x) for x in r.stdout.split() if x.strip().isdigit()]
            if r.returncode == 0 and vals:
                out["gpu_bytes"] = sum(vals) * 1024 * 1024
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
    try:
        info = {}
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        out["host_bytes"] = info["MemTotal"] - info["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        pass
    return out


def environment() -> dict:
    env = {"arch": platform.machine(), "hostname": platform.node(), "python": platform.python_version(), "gpu": None}
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=10)
            if r.returncode == 0 and r.stdout.strip():
                env["gpu"] = r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    return env


class Poller(threading.Thread):
    """Drains /metrics and samples memory every `every` seconds until stopped; keeps everything it read."""

    def __init__(self, url: str, every: float, metrics: bool):
        super().__init__(daemon=True)
        self.url, self.every, self.metrics = url, every, metrics
        self.iterations: list = []
        self.mem_peak: dict = {}
        self._stop_event = threading.Event()

    def sample(self) -> None:
        if self.metrics:
            self.iterations += drain_metrics(self.url)
        for key, value in memory_in_use().items():
            self.mem_peak[key] = max(value, self.mem_peak.get(key, 0))

    def run(self) -> None:
        while not self._stop_event.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.sample()  # the last iterations, after the last request


def run_bucket(spec: dict, prompts: list[str]) -> dict:
    url, model = spec["url"], spec["model"]
    n, conc = int(spec.get("requests", 4)), max(1, int(spec.get("concurrency", 1)))
    mt, temp, timeout = (int(spec.get("max_tokens", 128)), float(spec.get("temperature", 0.0)),
                         float(spec.get("timeout_s", 600)))
    for i in range(int(spec.get("warmup", 1))):
        stream_completion(url, model, prompts[i % len(prompts)], mt, temp, timeout)
    counters = spec.get("counters") or {}
    prometheus = counters.get("format") == "prometheus"
    metrics = bool(spec.get("metrics", True)) and not prometheus
    if metrics:
        drain_metrics(url)  # the warm-up's iterations are not measured
    before = counter_lines(url, counters["path"], counters["names"]) if prometheus else None
    poller = Poller(url, float(spec.get("poll_s", 0.5)), metrics)
    poller.sample()
    poller.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=conc) as pool:
        results = list(pool.map(lambda i: stream_completion(url, model, prompts[i % len(prompts)], mt, temp, timeout),
                                range(n)))
    wall = time.perf_counter() - start
    poller.stop()
    out = {"requests": results, "wall_s": wall, "iterations": poller.iterations, "mem_peak": poller.mem_peak}
    if prometheus:
        out["counters"] = {"names": counters["names"], "before": before,
                           "after": counter_lines(url, counters["path"], counters["names"])}
    return out


def main(argv: list[str] | None = None) -> int:
    spec = json.load(sys.stdin)
    out = {"env": environment(), "buckets": {}, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for bucket, prompts in spec["buckets"].items():
        out["buckets"][bucket] = run_bucket(spec, prompts)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
