#!/usr/bin/env python3
"""specfleet-bench-load: the load client `specfleet bench` runs ON a host against its loopback-bound trtllm-serve.

Python 3 standard library only (the hosts have python3; trtllm-serve binds 127.0.0.1, so the load must start on
the host). Reads one JSON spec on stdin, prints one JSON result on stdout:

  spec:   {"url": "http://127.0.0.1:8000", "model": "...", "buckets": {"short": [prompt, ...], ...},
           "requests": N, "concurrency": C, "warmup": W, "max_tokens": M, "temperature": T,
           "metrics": true, "counters": {"format", "path", "names", "samples"}, "poll_s": 0.5, "timeout_s": 600}
  result: {"env": {...}, "buckets": {"short": {"requests": [{"ttft_s", "e2e_s", "itl_s": [...],
           "output_tokens", "prompt_tokens", "error"}], "wall_s", "iterations": [...], "mem_peak": {...},
           "drain": {"before_error", "mark", "after_error", "failed"},
           "counters": {"names", "before": {"lines": [...]} or {"error": "..."}, "after": ...}}}}

An engine that counts acceptance in Prometheus counters (`counters.format` "prometheus": vLLM) is read once before the
measured requests and once after them: the lines of the `samples` named (the counters, their `_created` samples and
the process's start), as the server exposed them, or why the read failed (the controller sums and subtracts them, and
refuses a window that is not one server's: overview/host/overview.py); nothing is drained. Otherwise /metrics is
drained as below.

Per bucket: W warm-up requests (not measured), then /metrics is drained (and discarded: those iterations belong
to the warm-up; the last one's `iter` is the window's mark), then N requests run with C in flight while a thread
drains /metrics every poll_s seconds (the queue is emptied on read and bounded on the server, so it must be read
during the run) and samples memory in use; a final drain after the last request. `drain` says which drains failed:
the one before the window and the final one, by their error, and how many in all.

Every request streams (`stream: true`, `ignore_eos: true` so each produces exactly max_tokens): TTFT is the
arrival of the first chunk with text, the inter-token latencies are the gaps between later chunks (one chunk per
engine iteration: with speculation a chunk carries several tokens), and the output token count is the server's
`usage.completion_tokens`.
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
from typing import Any


def _conn(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname or "", u.port or 80, timeout=timeout), u.path.rstrip("/")


def stream_completion(url: str, model: str, prompt: str, max_tokens: int, temperature: float,
                      timeout: float = 600.0) -> dict[str, Any]:
    """One streamed /v1/completions request: TTFT, chunk gaps, e2e latency, output tokens."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                       "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}})
    out: dict[str, Any] = {"ttft_s": None, "e2e_s": None, "itl_s": [], "output_tokens": 0, "prompt_tokens": None,
                           "error": None}
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


def _get(url: str, path: str, timeout: float) -> tuple[bytes | None, str | None]:
    """GET url+path: (the body, None) on 200, else (None, why)."""
    conn, base = _conn(url, timeout)
    try:
        conn.request("GET", base + path)
        resp = conn.getresponse()
        payload = resp.read()
        return (payload, None) if resp.status == 200 else (None, f"HTTP {resp.status}")
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()


def drain_metrics(url: str, timeout: float = 10.0) -> tuple[list[dict[str, Any]], str | None]:
    """GET /metrics: TensorRT-LLM's iteration stats (a JSON list), removed from the server's queue by this read, and
    None; or ([], why the read failed)."""
    payload, error = _get(url, "/metrics", timeout)
    if payload is None:
        return [], error
    try:
        data = json.loads(payload or b"[]")
    except ValueError as exc:
        return [], f"not JSON: {exc}"
    return (data, None) if isinstance(data, list) else ([], "not a JSON list")


def counter_lines(url: str, path: str, samples: list[str], timeout: float = 10.0) -> dict[str, Any]:
    """{"lines": the exposition lines of the named samples} (a read that consumes nothing), or {"error": why}."""
    payload, error = _get(url, path, timeout)
    if payload is None:
        return {"error": error}
    return {"lines": [line for line in payload.decode("utf-8", "replace").splitlines()
                      if line.split("{", 1)[0].split(" ", 1)[0] in samples]}


def memory_in_use() -> dict[str, int]:
    """{"gpu_bytes": ... (nvidia-smi, when present), "host_bytes": MemTotal - MemAvailable}."""
    out: dict[str, int] = {}
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
        info: dict[str, int] = {}
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        out["host_bytes"] = info["MemTotal"] - info["MemAvailable"]
    except (OSError, KeyError, ValueError, IndexError):
        pass
    return out


def environment() -> dict[str, str | None]:
    env: dict[str, str | None] = {"arch": platform.machine(), "hostname": platform.node(),
                                  "python": platform.python_version(), "gpu": None}
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
    """Drains /metrics and samples memory every `every` seconds until stopped; keeps everything it read, and counts
    the drains that failed (`final_error`: why the last one, after the last request, failed)."""

    def __init__(self, url: str, every: float, metrics: bool):
        super().__init__(daemon=True)
        self.url, self.every, self.metrics = url, every, metrics
        self.iterations: list[dict[str, Any]] = []
        self.mem_peak: dict[str, int] = {}
        self.failed = 0
        self.final_error: str | None = None
        self._stop_event = threading.Event()

    def sample(self) -> str | None:
        error = None
        if self.metrics:
            its, error = drain_metrics(self.url)
            self.iterations += its
            self.failed += error is not None
        for key, value in memory_in_use().items():
            self.mem_peak[key] = max(value, self.mem_peak.get(key, 0))
        return error

    def run(self) -> None:
        while not self._stop_event.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self.final_error = self.sample()  # the last iterations, after the last request


def run_bucket(spec: dict[str, Any], prompts: list[str]) -> dict[str, Any]:
    url, model = spec["url"], spec["model"]
    n, conc = int(spec.get("requests", 4)), max(1, int(spec.get("concurrency", 1)))
    mt, temp, timeout = (int(spec.get("max_tokens", 128)), float(spec.get("temperature", 0.0)),
                         float(spec.get("timeout_s", 600)))
    for i in range(int(spec.get("warmup", 1))):
        stream_completion(url, model, prompts[i % len(prompts)], mt, temp, timeout)
    counters = spec.get("counters") or {}
    prometheus = counters.get("format") == "prometheus"
    metrics = bool(spec.get("metrics", True)) and not prometheus
    drain: dict[str, Any] = {}
    if metrics:  # the warm-up's iterations are not measured; the last one drained marks where the window starts
        warm, error = drain_metrics(url)
        drain = {"before_error": error, "mark": warm[-1].get("iter") if warm else None}
    keep = counters.get("samples") or counters.get("names") or []
    before = counter_lines(url, counters["path"], keep) if prometheus else None
    poller = Poller(url, float(spec.get("poll_s", 0.5)), metrics)
    poller.sample()
    poller.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=conc) as pool:
        results = list(pool.map(lambda i: stream_completion(url, model, prompts[i % len(prompts)], mt, temp, timeout),
                                range(n)))
    wall = time.perf_counter() - start
    poller.stop()
    out: dict[str, Any] = {"requests": results, "wall_s": wall, "iterations": poller.iterations,
                           "mem_peak": poller.mem_peak}
    if metrics:
        out["drain"] = {**drain, "after_error": poller.final_error, "failed": poller.failed + (drain["before_error"]
                                                                                             is not None)}
    if prometheus:
        out["counters"] = {"names": counters["names"], "before": before,
                           "after": counter_lines(url, counters["path"], keep)}
    return out


def main(argv: list[str] | None = None) -> int:
    spec = json.load(sys.stdin)
    buckets: dict[str, Any] = {}
    out = {"env": environment(), "buckets": buckets, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for bucket, prompts in spec["buckets"].items():
        buckets[bucket] = run_bucket(spec, prompts)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
