"""What `specfleet status` makes of the hosts' answers (status.HostOverview): each host's health verdict, its row,
the table (pure; unit-tested)."""

from __future__ import annotations


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
                    "gate_at": gate.get("at"), "uptime_s": info.get("uptime_s"), "iter_stats": info.get("iter_stats"),
                    "metrics": info.get("metrics"), "tokens_per_s": m.get("tokens_per_s"),
                    "acceptance_length": m.get("acceptance_length"), "acceptance_rate": m.get("acceptance_rate"),
                    "memory": info.get("memory"), "disk_free_bytes": info.get("disk_free_bytes"),
                    "lock": info.get("lock"), "image": info.get("image")})
    return out


def table(rs: list[dict]) -> list[str]:
    head = ("host", "state", "release", "profile", "unit", "health", "gate", "gate at", "uptime", "tok/s", "acc.len",
            "mem used", "disk free")
    lines = [head]
    for r in rs:
        mem = r["memory"] or {}
        used = _gb(mem.get("used_bytes")) + (" gpu" if mem.get("source") == "nvidia-smi" else "") if mem else "-"
        lines.append((r["host"], "ok" if r["healthy"] else f"BAD: {r['problem']}", r["release"] or "-",
                      r["profile"] or "-",
                      r["unit"] or "-", str(r["health"] if r["health"] is not None else "-"), r["gate"] or "-",
                      r["gate_at"] or "-", _dur(r["uptime_s"]),
                      f"{r['tokens_per_s']:.1f}" if r["tokens_per_s"] else "-",
                      f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-", used,
                      _gb(r["disk_free_bytes"])))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]
