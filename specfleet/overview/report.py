"""What `specfleet status` makes of the hosts' answers (status.HostOverview): each host's health verdict, its row,
the table (pure; unit-tested)."""

from __future__ import annotations

from ..gateway.render import server_name

POOL_STATES = {"UP": "ready", "DRAIN": "drain", "NOLB": "drain", "MAINT": "maint"}  # else: down


def healthy(info: dict | None) -> tuple[bool, str]:
    """(healthy, why not): reachable, a current release, unit active, /health 200, its gate passed."""
    if not info:
        return False, "unreachable"
    if info.get("error"):
        return False, f"status not read: {info['error']}"
    gate = info.get("gate") or {}
    for bad, why in ((not info.get("release"), "no release"),
                     (info.get("unit") != "active", f"unit {info.get('unit')}"),
                     (info.get("health") != 200, f"/health {info.get('health')}"),
                     (gate.get("release") != info.get("release") or gate.get("result") != "passed",
                      f"gate {gate.get('result') or 'never run'}"
                      + ("" if gate.get("release") in (None, info.get("release"))
                         else f" (for {gate.get('release')})"))):
        if bad:
            return False, why
    return True, "ok"


def gate_memory(gate: dict) -> str | None:
    """THE form of a gate's memory figures (host/readiness.memory): MemAvailable right after the page cache was dropped
    at the container's start, then once the model loaded (on a GB10, what the load took of the one pool)."""
    start, loaded = gate.get("mem_available_at_start_mib"), gate.get("mem_available_loaded_mib")
    if start is None and loaded is None:
        return None
    return f"{_gb(None if start is None else start * 1048576)}->{_gb(None if loaded is None else loaded * 1048576)}"


def _gb(x):
    return "-" if x is None else f"{x / 1e9:.1f}G"


def _dur(s):
    if s is None:
        return "-"
    d, rest = divmod(int(s), 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{d}d{h:02d}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def rows(hosts: list[str], found: dict[str, dict]) -> list[dict]:
    out = []
    for h in hosts:
        info = found.get(h) or {}
        ok, why = healthy(found.get(h))
        m = info.get("metrics") or {}
        gate = info.get("gate") or {}
        out.append({"host": h, "reachable": bool(found.get(h)) and not info.get("error"), "healthy": ok,
                    "problem": None if ok else why,
                    "release": info.get("release"), "profile": info.get("profile"), "unit": info.get("unit"),
                    "health": info.get("health"), "gate": gate.get("result"), "gate_release": gate.get("release"),
                    "gate_at": gate.get("at"), "gate_memory": gate_memory(gate), "uptime_s": info.get("uptime_s"),
                    "iter_stats": info.get("iter_stats"),
                    "metrics": info.get("metrics"), "tokens_per_s": m.get("tokens_per_s"),
                    "acceptance_length": m.get("acceptance_length"), "acceptance_rate": m.get("acceptance_rate"),
                    "memory": info.get("memory"), "disk_free_bytes": info.get("disk_free_bytes"),
                    "lock": info.get("lock"), "image": info.get("image")})
    return out


def pair_rows(rs: list[dict], found: dict[str, dict], pairs: dict[str, str]) -> list[dict]:
    """A two-Spark pair as ONE row, its head's, with both hosts (`hosts`): healthy when the head is (its release,
    unit, /health, gate) and its worker holds the worker release the head's release names, unit active, its side
    passed. `pairs`: head -> worker. A worker whose head is not in `rs` keeps a row of its own, judged as a worker."""
    by_host = {r["host"]: r for r in rs}
    heads = {w: h for h, w in pairs.items() if h in by_host}
    out = []
    for r in rs:
        if r["host"] in heads:
            continue  # in its head's row
        worker = pairs.get(r["host"]) or (r["host"] if r["host"] in pairs.values() else None)
        if worker is None:
            out.append(r)
            continue
        wanted = ((found.get(r["host"]) or {}).get("pair") or {}).get("worker", {}).get("release")
        problem = worker_problem(found.get(worker), worker, wanted)
        worker_row = by_host.get(worker) or rows([worker], found)[0]  # a worker outside the selection: its read
        row = {**r, "hosts": [r["host"]] if worker == r["host"] else [r["host"], worker],
               "worker": {k: worker_row.get(k)
                          for k in ("host", "reachable", "release", "unit", "gate", "gate_release")}}
        if worker == r["host"]:  # a worker alone: its own side is all there is to judge
            row.update(healthy=problem is None, problem=problem)
        elif r["healthy"] and problem:
            row.update(healthy=False, problem=problem)
        out.append(row)
    return out


def worker_problem(info: dict | None, worker: str, wanted: str | None) -> str | None:
    """Why a pair's worker does not hold its side (None: it does): reachable, unit active, the head's release's worker
    release (`wanted`, when the head names one), its side passed (gate.json role worker)."""
    if not info or info.get("error"):
        return f"worker {worker} unreachable" if not info else f"worker {worker}: status not read: {info['error']}"
    gate = info.get("gate") or {}
    for bad, why in ((info.get("unit") != "active", f"unit {info.get('unit')}"),
                     (wanted is not None and info.get("release") != wanted,
                      f"holds {info.get('release') or 'no release'}, not {wanted}"),
                     (gate.get("release") != info.get("release") or gate.get("result") != "passed",
                      f"its side {gate.get('result') or 'never started'}")):
        if bad:
            return f"worker {worker}: {why}"
    return None


def table(rs: list[dict]) -> list[str]:
    head = ("host", "state", "release", "profile", "unit", "health", "gate", "gate at", "uptime", "tok/s", "acc.len",
            "mem used", "avail start->loaded", "disk free")
    lines = [head]
    for r in rs:
        mem = r["memory"] or {}
        used = _gb(mem.get("used_bytes")) + (" gpu" if mem.get("source") == "nvidia-smi" else "") if mem else "-"
        lines.append(("+".join(r.get("hosts") or [r["host"]]), "ok" if r["healthy"] else f"BAD: {r['problem']}",
                      r["release"] or "-", r["profile"] or "-",
                      r["unit"] or "-", str(r["health"] if r["health"] is not None else "-"), r["gate"] or "-",
                      r["gate_at"] or "-", _dur(r["uptime_s"]),
                      f"{r['tokens_per_s']:.1f}" if r["tokens_per_s"] else "-",
                      f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-", used,
                      r.get("gate_memory") or "-", _gb(r["disk_free_bytes"])))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines]


# ---- behind gateways: each Spark's state in each gateway's pool, and a row per gateway --------------------------
def pool_state(status: str) -> str:
    """HAProxy's server status (UP, UP 1/2, DOWN (agent), DRAIN, MAINT, ...) as the pool sees it."""
    return POOL_STATES.get((status or "").split(" ")[0], "down")


def pools(gateways: dict[str, dict], sparks: list[str]) -> dict[str, dict[str, str]]:
    """Spark -> {gateway: ready | drain | maint | down | unknown (the gateway did not answer)}."""
    out: dict[str, dict[str, str]] = {h: {} for h in sparks}
    for g, answer in gateways.items():
        by_server = {r["server"]: r["status"] for r in answer.get("servers") or ()}
        for h in sparks:
            out[h][g] = "unknown" if answer.get("error") else pool_state(by_server.get(server_name(h), "DOWN"))
    return out


def gateway_rows(gateways: dict[str, dict]) -> list[dict]:
    """A row per gateway: healthy while its HAProxy answers and every model has a ready Spark."""
    out = []
    for g, answer in gateways.items():
        servers = answer.get("servers") or []
        by_backend: dict[str, list[str]] = {}
        for r in servers:
            by_backend.setdefault(r["backend"], []).append(pool_state(r["status"]))
        empty = sorted(b for b, states in by_backend.items() if "ready" not in states)
        problem = (f"not read: {answer['error']}" if answer.get("error")
                   else f"no ready Spark for {', '.join(empty)}" if empty else None)
        ready = sum(pool_state(r["status"]) == "ready" for r in servers)
        out.append({"host": g, "role": "gateway", "healthy": problem is None, "problem": problem,
                    "ready": ready, "servers": len(servers)})
    return out


def gateway_table(rs: list[dict], spark_rows: list[dict], pool: dict[str, dict[str, str]]) -> list[str]:
    """The gateways under the Sparks' table: each gateway's verdict, then each Spark's state in each pool."""
    lines = [f"{r['host']}  gateway  {'ok' if r['healthy'] else 'BAD: ' + r['problem']}  "
             f"{r['ready']}/{r['servers']} Spark(s) ready" for r in rs]
    width = max((len(r["host"]) for r in spark_rows), default=0)
    for r in spark_rows:
        states = pool.get(r["host"]) or {}
        lines.append(f"  {r['host'].ljust(width)}  in pool: " + ", ".join(f"{g} {st}" for g, st in states.items()))
    return lines
