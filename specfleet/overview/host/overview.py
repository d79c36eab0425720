"""What `specfleet status` shows of a host, as one JSON object: release, unit, gate, lock, uptime, health,
iteration figures (/metrics, only when asked), memory and free disk.

Shipped as `python3 -c <release_state.py> PATHS | python3 -c <this file's text> DATA_DIR SERVICE METRICS(0|1)
RELEASES CONFIG_FILE` (paths and names from host/layout.py): the release state (current release, its record, gate,
lock) comes on stdin from THE reader, host/release_state.py. Stdlib only, read-only except for /metrics,
which it reads (and so drains) only when asked and no bench holds the host's lock. An engine that counts acceptance in
Prometheus counters (the release record's `counters`: vLLM) is read every time: reading them consumes nothing.
`acceptance` (iteration stats) and `acceptance_from_counters` (counter deltas) are THE acceptance arithmetic:
`specfleet bench` imports them.
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


def acceptance(iterations):
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
_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?[ \t]+(\S+)(?:[ \t]+\S+)?$')


def counter_sums(text, names):
    """Each counter of `names` summed over its label sets (vLLM labels them per model and engine core), from a
    Prometheus text exposition; a counter the text lacks counts 0."""
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if m and m.group(1) in sums and re.fullmatch(r"[-+]?[0-9.eE+-]+", m.group(2)):
            sums[m.group(1)] += float(m.group(2))
    return sums


def acceptance_from_counters(before, after, names, seconds=None):
    """Acceptance over a window from the deltas of (drafts, draft tokens, accepted tokens) counters: rate = accepted
    / draft tokens, mean acceptance length = 1 + accepted / drafts (vLLM's own definition, v1/spec_decode/metrics.py),
    drafts per second over `seconds`. A counter that went down (the server restarted) makes the window unusable."""
    drafts_n, tokens_n, accepted_n = names
    d = {n: after.get(n, 0) - before.get(n, 0) for n in names}
    if min(d.values()) < 0:
        return {"error": "a counter went down during the window (the server restarted)"}
    drafts, tokens, accepted = d[drafts_n], d[tokens_n], d[accepted_n]
    return {"drafts": int(drafts), "draft_tokens": int(tokens), "accepted_tokens": int(accepted),
            "acceptance_length": 1 + accepted / drafts if drafts else None,
            "acceptance_rate": accepted / tokens if tokens else None,
            "drafts_per_s": drafts / seconds if drafts and seconds else None}


def iteration_figures(its):
    """Tokens, busy time and throughput since the previous /metrics reader, plus the acceptance figures."""
    tokens = busy = 0
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


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""


def uptime_s(svc):
    started = sh("docker", "inspect", "--format", "{{.State.Running}} {{.State.StartedAt}}", svc)
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", started.split()[1]) if started.startswith("true ") else None
    if not m:
        return None
    return max(0, int(time.time() - calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))))


def get(url, path, timeout=5):
    with urllib.request.urlopen(url + path, timeout=timeout) as r:
        return r.status, r.read()


def health(url):
    if not url:
        return None
    try:
        return get(url, "/health")[0]
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return "%s" % (getattr(e, "reason", None) or e)


def metrics(out, url, want, counters=None):
    """Prometheus counters (`counters`: the record's) since the server started, whenever it is healthy; else /metrics
    iteration figures, when asked, enabled in the release's config, healthy, and no bench reads them."""
    if counters and counters.get("format") == "prometheus":
        if out["health"] != 200:
            return None
        try:
            sums = counter_sums(get(url, counters["path"], 10)[1].decode("utf-8", "replace"), counters["names"])
        except Exception as e:
            return {"error": str(e)}
        since = acceptance_from_counters({}, sums, counters["names"], out.get("uptime_s"))
        return {**since, "source": "the server's counters since it started"}
    if not (want and out["iter_stats"] and out["health"] == 200):
        return None
    if (out["lock"] or "").startswith("bench "):
        return {"skipped": "a specfleet bench holds the lock (it reads /metrics)"}
    try:
        return iteration_figures(json.loads(get(url, "/metrics", 10)[1] or b"[]"))
    except Exception as e:
        return {"error": str(e)}


def memory():
    """Used memory: nvidia-smi's figure where it prints digits (a GB10 prints N/A), else MemTotal - MemAvailable."""
    mem = {}
    if shutil.which("nvidia-smi"):
        used = sh("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
        vals = [int(x) for x in used.split() if x.isdigit()]
        if vals:
            mem = {"source": "nvidia-smi", "used_bytes": sum(vals) * 1048576}
    try:
        info = {}
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


def overview(state, data, svc, want_metrics, releases, config_file):
    """`state` is release_state.read() of the host."""
    out = {"service": svc}
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
    print(json.dumps(overview(json.load(sys.stdin), a[1], a[2], a[3] == "1", *a[4:6])))
