"""What `specfleet status` shows of a host, as one JSON object: release, unit, gate, lock, uptime, health,
iteration figures (/metrics, only when asked), memory and free disk.

Shipped as `python3 -c <release_state.py> PATHS | python3 -c <this file's text> DATA_DIR SERVICE METRICS(0|1)
RELEASES CONFIG_FILE` (paths and names from host/layout.py): the release state (current release, its record, gate,
lock) comes on stdin from THE reader, host/release_state.py. Stdlib only, read-only except for /metrics,
which it reads (and so drains) only when asked and no bench holds the host's lock. An engine that counts acceptance in
Prometheus counters (the release record's `counters`: vLLM) is read every time: reading them consumes nothing.
`acceptance` (iteration stats), `acceptance_from_counters` (counter deltas) and the rules of a window that make sure a
window is one server's and only the window's (`counter_window`, `iteration_window`) are THE acceptance arithmetic:
`specfleet bench` imports them. `serving_time` is how long a server has served (its drafts per second divide by it).
"""

import calendar
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any


def acceptance(iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """Acceptance from TensorRT-LLM iteration stats: length = (accepted + requests with drafts) / requests with
    drafts (summed over iterations, as py_executor computes it per iteration), rate = accepted / drafted."""
    drafted = accepted = with_draft = 0
    gpu_peak = 0
    for it in iterations:
        gpu_peak = max(gpu_peak, int(it.get("gpuMemUsage") or 0))
        sd = it.get("specDecodingStats") or {}
        drafted += int(sd.get("numDraftTokens") or 0)
        accepted += int(sd.get("numAcceptedTokens") or 0)
        with_draft += int(sd.get("numRequestsWithDraftTokens") or 0)
    return {
        "iterations": len(iterations), "draft_tokens": drafted, "accepted_tokens": accepted,
        "requests_with_draft": with_draft,
        "acceptance_length": (accepted + with_draft) / with_draft if with_draft else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "gpu_mem_peak_bytes": gpu_peak or None,
    }


# One sample line of the Prometheus text exposition format: name, optional {labels} (quoted values may hold any
# character, escaped), value, optional timestamp.
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)(?:[ \t]+\S+)?$')
# prometheus_client's process collector, in the default registry that vLLM serves when it runs one API server
# (prometheus_client 0.21.1 process_collector.py:48-72, :100; vllm/v1/metrics/prometheus.py:39-52 at v0.20.1)
PROCESS_START = "process_start_time_seconds"
RESTART = "the server restarted during the window ({})"
CANNOT_TELL = "cannot tell whether the server restarted during the window: {}"


def created_name(counter: str) -> str:
    """The sample prometheus_client exposes beside a counter's `<name>_total`: `<name>_created`, the time each labelled
    child was made or last reset (0.21.1 metrics.py:304-340, Counter; none with PROMETHEUS_DISABLE_CREATED_SERIES)."""
    return counter.removesuffix("_total") + "_created"


def window_samples(names: list[str]) -> list[str]:
    """The samples a window's read keeps: the counters, their `_created` samples and the process's start."""
    return [*names, *(created_name(n) for n in names), PROCESS_START]


def samples(text: str) -> list[tuple[str, str, float]]:
    """(name, labels as written, value) of each sample line of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and re.fullmatch(r"[-+]?[0-9.eE+-]+", m.group(3)):
            try:
                out.append((m.group(1), m.group(2) or "", float(m.group(3))))
            except ValueError:  # digits and signs that are no number
                continue
    return out


def counter_read(text: str, names: list[str]) -> dict[str, Any]:
    """One read of a server's counters: each counter of `names` summed over its label sets (vLLM labels them per
    model and engine core; a counter the text lacks counts 0), whether any was there, the `_created` sample of each
    of their label sets, and the process's start (None when the text has none)."""
    created_of = {created_name(n) for n in names}
    read: dict[str, Any] = {"sums": dict.fromkeys(names, 0.0), "present": False, "created": {}, "start": None}
    for name, labels, value in samples(text):
        if name in read["sums"]:
            read["sums"][name] += value
            read["present"] = True
        elif name in created_of:
            read["created"][name + labels] = value
        elif name == PROCESS_START:
            read["start"] = value
    return read


def counter_sums(text: str, names: list[str]) -> dict[str, float]:
    """Each counter of `names` summed over its label sets, from a Prometheus text exposition."""
    sums: dict[str, float] = counter_read(text, names)["sums"]
    return sums


def restarted(before: dict[str, Any], after: dict[str, Any], names: list[str]) -> str | None:
    """What shows that the server restarted between two counter_read()s: "<sample> changed"; "" when they show one
    process; None when they cannot tell (neither read both with `_created` samples nor both with a process start).
    A `_created` sample changes when a counter's child is made again, in a new process or reset in the same one."""
    b, a = before["created"], after["created"]
    for n in names:
        created = created_name(n)
        keys = {k for k in (*b, *a) if k.split("{", 1)[0] == created}
        if any(b.get(k) != a.get(k) for k in keys):
            return f"{created} changed"
    if before["start"] is not None and after["start"] is not None:
        return f"{PROCESS_START} changed" if before["start"] != after["start"] else ""
    return "" if b and a else None


def acceptance_from_counters(before: dict[str, float], after: dict[str, float], names: list[str],
                             seconds: float | None = None) -> dict[str, Any]:
    """Acceptance over a window from the deltas of (drafts, draft tokens, accepted tokens) counters: rate = accepted
    / draft tokens, mean acceptance length = 1 + accepted / drafts (vLLM's own definition, v1/spec_decode/metrics.py),
    drafts per second over `seconds`. A counter that went down (the server restarted) makes the window unusable."""
    drafts_n, tokens_n, accepted_n = names
    d = {n: after.get(n, 0) - before.get(n, 0) for n in names}
    if min(d.values()) < 0:
        return {"error": RESTART.format("a counter went down")}
    drafts, tokens, accepted = d[drafts_n], d[tokens_n], d[accepted_n]
    return {"drafts": int(drafts), "draft_tokens": int(tokens), "accepted_tokens": int(accepted),
            "acceptance_length": 1 + accepted / drafts if drafts else None,
            "acceptance_rate": accepted / tokens if tokens else None,
            "drafts_per_s": drafts / seconds if drafts and seconds else None}


def counter_window(before: dict[str, Any], after: dict[str, Any], names: list[str],
                   seconds: float | None = None) -> dict[str, Any]:
    """Acceptance over a window of counters that a read does not consume (vLLM's), read before and after it
    (`before`, `after`: the load client's reads, {"lines": [...]} or {"error": why}); {"error": why} when the window
    is not one server's: a read failed (a missing "before" would count everything since the server started), or the
    server restarted in between (restarted(); a counter that went down). Reads that cannot tell, of counters that are
    there, are refused too: vLLM exposes neither `_created` nor the process start with PROMETHEUS_DISABLE_CREATED_SERIES
    set and the process collector gone, or with several API servers (vllm v0.20.1 entrypoints/cli/serve.py:236-237:
    prometheus_client's multi-process mode)."""
    ends = {"before": "the window would count everything since the server started", "after": "the window has no end"}
    for when, read in (("before", before), ("after", after)):
        if read.get("error") is not None:
            return {"error": f"the read of the server's counters {when} the window failed ({read['error']}): "
                             f"{ends[when]}"}
    b, a = (counter_read("\n".join(r.get("lines") or []), names) for r in (before, after))
    why = restarted(b, a, names)
    if why:
        return {"error": RESTART.format(why)}
    if why is None and (b["present"] or a["present"]):
        return {"error": CANNOT_TELL.format(f"its /metrics shows neither the counters' _created samples nor "
                                            f"{PROCESS_START}")}
    return acceptance_from_counters(b["sums"], a["sums"], names, seconds)


def iteration_window(drain: dict[str, Any], iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """Acceptance over a window of trtllm-serve's iteration stats (a read removes them: the load client drains them
    before the window, during it and after its last request; `drain`: {"before_error", "mark", "after_error"}, mark
    being the last `iter` drained before the window); {"error": why} when the window is not one server's: a drain
    before it failed (its iterations would include the warm-up's), the last drain failed (the window's last ones are
    missing), or a new server process numbered its iterations again: an `iter` (the executor's loop count,
    py_executor.py `stats.iter = self.iter_counter`) lower than the one before it. Equal ones pass: the micro-batches
    of a pipeline-parallel loop share one."""
    if drain.get("before_error") is not None:
        return {"error": f"the drain of /metrics before the window failed ({drain['before_error']}): the window would "
                         "count the warm-up's iterations"}
    if drain.get("after_error") is not None:
        return {"error": f"the last drain of /metrics failed ({drain['after_error']}): the window's last iterations "
                         "are missing"}
    last = drain.get("mark")
    for it in iterations:
        n = it.get("iter")
        if not isinstance(n, int) or isinstance(n, bool):
            return {"error": CANNOT_TELL.format("an iteration stat has no `iter`")}
        if last is not None and n < last:
            return {"error": RESTART.format(f"an iteration's `iter` went from {last} to {n}")}
        last = n
    return acceptance(iterations)


def _epoch(iso: Any) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(iso), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def serving_time(out: dict[str, Any], read: dict[str, Any], now: float) -> tuple[float | None, str]:
    """How long the server has served, and since when: since the current release's gate passed (gate.json's `at`,
    to the second: /health answered and a smoke completion came back), the model's load before it left out. Unknown
    (None, why) when that gate has not passed, or when the server started after it (a restart no gate saw, whose load
    time nothing records): its process start, else its counters' first `_created`, else the container's start."""
    gate = out.get("gate") or {}
    at = _epoch(gate.get("at"))
    if gate.get("result") != "passed" or gate.get("release") != out.get("release") or at is None:
        return None, f"unknown: its gate has not passed for {out.get('release')}"
    started = read["start"] if read["start"] is not None else min(read["created"].values(), default=None)
    if started is None and out.get("uptime_s") is not None:
        started = now - out["uptime_s"]
    if started is None:
        return None, (f"unknown: nothing tells when the server started (no {PROCESS_START}, no _created series, no "
                      "container start)")
    if started > at + 1:
        return None, f"unknown: the server started after its gate passed (at {gate['at']})"
    return (now - at if now > at else None), f"since its gate passed at {gate['at']}"


def iteration_figures(its: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens, busy time and throughput since the previous /metrics reader, plus the acceptance figures."""
    tokens, busy = 0, 0.0
    for it in its:
        ib, sd = it.get("inflightBatchingStats") or {}, it.get("specDecodingStats") or {}
        busy += float(it.get("iterLatencyMS") or 0)
        n_req = int(sd.get("numRequestsWithDraftTokens") or 0)
        tokens += int(ib.get("numContextRequests") or 0) + (int(sd.get("numAcceptedTokens") or 0) + n_req
                                                            if n_req else int(ib.get("numGenRequests") or 0))
    acc = acceptance(its)
    return {"iterations": len(its), "tokens": tokens, "busy_s": busy / 1000,
            "tokens_per_s": tokens / (busy / 1000) if busy else None,
            "acceptance_length": acc["acceptance_length"], "acceptance_rate": acc["acceptance_rate"]}


def sh(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def uptime_s(svc: str) -> int | None:
    started = sh("docker", "inspect", "--format", "{{.State.Running}} {{.State.StartedAt}}", svc)
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", started.split()[1]) if started.startswith("true ") else None
    started_at = _epoch(m.group(1) + "Z") if m else None
    return None if started_at is None else max(0, int(time.time() - started_at))


def get(url: str, path: str, timeout: float = 5) -> tuple[int, bytes]:
    with urllib.request.urlopen(url + path, timeout=timeout) as r:
        return int(r.status), bytes(r.read())


def health(url: str | None) -> int | str | None:
    if not url:
        return None
    try:
        return get(url, "/health")[0]
    except urllib.error.HTTPError as e:
        return int(e.code)
    except Exception as e:
        return "%s" % (getattr(e, "reason", None) or e)


def metrics(out: dict[str, Any], url: str | None, want: bool,
            counters: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Prometheus counters (`counters`: the record's) since the server started, whenever it is healthy, with drafts
    per second over the time it has served (serving_time); else /metrics iteration figures, when asked, enabled in the
    release's config, healthy, and no bench reads them."""
    if out["health"] != 200 or not url:  # /health answers 200 on the release's URL: it serves
        return None
    if counters and counters.get("format") == "prometheus":
        try:
            read = counter_read(get(url, counters["path"], 10)[1].decode("utf-8", "replace"), counters["names"])
        except Exception as e:
            return {"error": str(e)}
        serving_s, serving = serving_time(out, read, time.time())
        since = acceptance_from_counters({}, read["sums"], counters["names"], serving_s)
        return {**since, "serving_s": serving_s, "serving": serving, "source": "the server's counters since it started"}
    if not (want and out["iter_stats"]):
        return None
    if (out["lock"] or "").startswith("bench "):
        return {"skipped": "a specfleet bench holds the lock (it reads /metrics)"}
    try:
        its = json.loads(get(url, "/metrics", 10)[1] or b"[]")
        return iteration_figures(its if isinstance(its, list) else [])
    except Exception as e:
        return {"error": str(e)}


def memory() -> dict[str, Any]:
    """Used memory: nvidia-smi's figure where it prints digits (a GB10 prints N/A), else MemTotal - MemAvailable."""
    mem: dict[str, Any] = {}
    if shutil.which("nvidia-smi"):
        used = sh("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
        vals = [int(x) for x in used.split() if x.isdigit()]
        if vals:
            mem = {"source": "nvidia-smi", "used_bytes": sum(vals) * 1048576}
    try:
        info: dict[str, int] = {}
        with open("/proc/meminfo") as fh:
            for line in fh:
                k, _, v = line.partition(":")
                info[k] = int(v.split()[0]) * 1024
        mem.setdefault("source", "meminfo")
        mem.setdefault("used_bytes", info["MemTotal"] - info["MemAvailable"])
        mem["available_bytes"] = info["MemAvailable"]
    except Exception:
        pass
    return mem


def overview(state: dict[str, Any], data: str, svc: str, want_metrics: bool, releases: str,
             config_file: str) -> dict[str, Any]:
    """`state` is release_state.read() of the host."""
    out: dict[str, Any] = {"service": svc}
    cur, rec = state.get("current"), state.get("record") or {}
    out.update(release=cur, profile=rec.get("profile"), image=rec.get("image"), url=rec.get("url"),
               pair=rec.get("pair"))
    svc = rec.get("service") or svc
    out["unit"] = sh("systemctl", "is-active", svc) or "unknown"
    out["gate"], out["lock"] = state.get("gate") or {}, state.get("lock")
    out["uptime_s"] = uptime_s(svc)
    out["health"] = health(rec.get("url"))
    try:
        with open(os.path.join(releases, cur or "-", rec.get("options_file") or config_file)) as fh:
            out["iter_stats"] = re.search(r"^enable_iter_perf_stats:\s*true\s*$", fh.read(), re.M) is not None
    except OSError:
        out["iter_stats"] = False
    out["metrics"] = metrics(out, rec.get("url"), want_metrics, rec.get("counters"))
    out["memory"] = memory()
    d = data
    while not os.path.isdir(d):
        d = os.path.dirname(d) or "/"
    st = os.statvfs(d)
    out["disk_free_bytes"] = st.f_bavail * st.f_frsize
    return out


if __name__ == "__main__":
    a = sys.argv
    print(json.dumps(overview(json.load(sys.stdin), a[1], a[2], a[3] == "1", a[4], a[5])))
