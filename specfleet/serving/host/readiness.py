"""The readiness gate's probe (stdlib; installed next to the host tool, which imports it): the unit is active,
`/health` answers 200 within the release's timeout, then the smoke completion returns non-empty text. A unit that
exits or restarts meanwhile fails it at once (the server refused to start); it never waits out the timeout then."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from hostlib import Fail, read_json, sh
from layout import SMOKE_FILE

MEMINFO = "/proc/meminfo"


def n_restarts(service: str) -> int:
    out = sh("systemctl", "show", "-p", "NRestarts", "--value", service, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def memory(layout, since: float = 0.0) -> dict:
    """For a passed gate's result: MemAvailable (MiB) when the container last started, right after its page cache was
    dropped (drop-caches' record, written by the unit's ExecStartPre), and now that the model is loaded. On a GB10 the
    difference is what the load took of the one pool CPU and GPU share. A record older than `since` (this switch's
    start; drop-caches did not write one) is not this start's and is left out. {} where neither can be read."""
    out = {}
    start = read_json(Path(layout.mem_at_start)) or {}
    if isinstance(start.get("after_kb"), int) and start["after_kb"] > 0 and start.get("at", 0) >= int(since):
        out["mem_available_at_start_mib"] = start["after_kb"] // 1024
    try:
        for line in Path(MEMINFO).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                out["mem_available_loaded_mib"] = int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def journal_tail(service: str, lines: int = 30) -> str:
    out = sh("journalctl", "-u", service, "-n", str(lines), "--no-pager", "-o", "cat", check=False)
    return out.stdout.rstrip() or "(journal empty)"


def gate_once(rec: dict, release_dir: Path, timeout: int | None, progress) -> tuple[float, str]:
    """Seconds until ready and the smoke completion's text, or Fail (why). `progress(**fields)` is told each poll."""
    gate, url, service = rec["gate"], rec["url"], rec["service"]
    limit = timeout or gate["health_timeout_sec"]
    start = time.monotonic()
    deadline = start + limit
    restarts0 = n_restarts(service)
    last = "no answer yet"
    while True:
        state = sh("systemctl", "is-active", service, check=False).stdout.strip()
        progress(kind="gate", release=rec["id"], phase="health", elapsed=round(time.monotonic() - start, 1),
                 timeout=limit, unit=state, last=last)
        if state == "failed" or n_restarts(service) > restarts0:
            raise Fail(f"{service} exited while starting (state {state}); the server refused to start")
        if state == "inactive":
            raise Fail(f"{service} is not running")
        try:
            with urllib.request.urlopen(url + "/health", timeout=10) as resp:
                if resp.status == 200:
                    break
                last = f"/health answered {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"/health answered {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            last = f"/health: {getattr(exc, 'reason', exc)}"
        if time.monotonic() > deadline:
            raise Fail(f"/health not 200 within {limit}s (last: {last})")
        time.sleep(gate["health_interval_sec"])
    progress(kind="gate", release=rec["id"], phase="smoke", elapsed=round(time.monotonic() - start, 1),
             timeout=limit, unit="active", last="/health 200")
    body = (release_dir / SMOKE_FILE).read_bytes()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=gate["smoke_timeout_sec"]) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise Fail(f"smoke completion answered HTTP {exc.code}: {exc.read()[:200]!r}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise Fail(f"smoke completion failed: {exc}") from None
    text = ((answer.get("choices") or [{}])[0].get("text") or "").strip()
    if not text:
        raise Fail("smoke completion returned empty text")
    return time.monotonic() - start, text
