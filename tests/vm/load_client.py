"""The VM tier's load client (stdlib only; copied into a guest and run there with python3).

It sends OpenAI completions, streaming and not in turn, to one base URL on the guest's loopback or the lab's own
network, at a fixed concurrency, and prints one JSON object per request on stdout, then a summary line:
    {"t0": .., "t1": .., "stream": bool, "status": int, "ok": bool, "error": str}
    {"summary": {"requests": n, "failed": n, "p50_s": x, "p99_s": x}}

Bounded in count and time: it stops at `--count` requests, at `--seconds`, or as soon as `--stop-file` exists,
whichever comes first (the requests in flight finish). A request is ok only when it got 200 and a whole answer:
for a stream the `data: [DONE]` line, otherwise JSON with a non-empty choices list.

An API key, if any, is read from the first line of stdin (never an argument: it would show in the guest's
process list)."""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import sys
import threading
import time
import urllib.parse


def allowed(host: str) -> bool:
    """Only the guest's loopback and the lab's own network (10.88.0.0/16, specfleet_lab/lan.py) are targets."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address in ipaddress.ip_network("10.88.0.0/16")


def one(url: urllib.parse.SplitResult, key: str, model: str, stream: bool, max_tokens: int, timeout: float) -> dict:
    body = json.dumps({"model": model, "prompt": "Count to ten.", "max_tokens": max_tokens, "stream": stream})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    t0 = time.time()
    record = {"t0": t0, "stream": stream, "status": 0, "ok": False, "error": ""}
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout)
    try:
        conn.request("POST", url.path.rstrip("/") + "/v1/completions", body=body, headers=headers)
        resp = conn.getresponse()
        record["status"] = resp.status
        data = resp.read()
        if resp.status != 200:
            record["error"] = data[:200].decode("utf-8", "replace")
        elif stream:
            record["ok"] = b"data: [DONE]" in data
            record["error"] = "" if record["ok"] else "stream ended without [DONE]"
        else:
            record["ok"] = bool(json.loads(data).get("choices"))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        record["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    record["t1"] = time.time()
    return record


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default="openai/gpt-oss-120b")
    p.add_argument("--count", type=int, default=100, help="at most this many requests")
    p.add_argument("--seconds", type=float, default=600, help="at most this long")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--stream-every", type=int, default=2, help="every n-th request streams (0: none)")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument("--pause", type=float, default=0.0, help="seconds each worker waits between its requests")
    p.add_argument("--stop-file", default="", help="stop sending once this file exists")
    p.add_argument("--timeout", type=float, default=120, help="per-request socket timeout")
    p.add_argument("--key-from-stdin", action="store_true")
    args = p.parse_args(argv)
    url = urllib.parse.urlsplit(args.url)
    if url.scheme != "http" or not allowed(url.hostname or ""):
        print(f"load_client: refusing {args.url}: only http:// on loopback or 10.88.0.0/16", file=sys.stderr)
        return 2
    key = sys.stdin.readline().strip() if args.key_from_stdin else ""
    deadline = time.monotonic() + args.seconds
    lock, issued, records = threading.Lock(), [0], []

    def worker():
        while time.monotonic() < deadline and not (args.stop_file and os.path.exists(args.stop_file)):
            with lock:
                if issued[0] >= args.count:
                    return
                issued[0] += 1
                n = issued[0]
            stream = bool(args.stream_every) and n % args.stream_every == 0
            record = one(url, key, args.model, stream, args.max_tokens, args.timeout)
            with lock:
                records.append(record)
                print(json.dumps(record), flush=True)
            time.sleep(args.pause)

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    latencies = [r["t1"] - r["t0"] for r in records if r["ok"]]
    print(json.dumps({"summary": {"requests": len(records), "failed": sum(not r["ok"] for r in records),
                                  "p50_s": percentile(latencies, 0.50), "p99_s": percentile(latencies, 0.99)}}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
