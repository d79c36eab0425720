"""Host jobs: long work (a fetch, an image pull, a switch) run detached from the SSH session as a transient systemd
unit (specfleet-job-<id>), with a log, a progress file and a result under <data_dir>/jobs/<id>/; one at a time, and
a second start of the same key attaches to the running one. The host tool's `job start|status|run`
(specfleet_host.py)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import deque
from pathlib import Path

import release_state
from hostlib import Fail, atomic_write, now_iso, read_json, sh, tail
from layout import JOB_UNIT_PREFIX, Layout

JOB_KEEP = 20  # finished job directories kept for their logs


class Jobs:
    def __init__(self, layout: Layout, tool: str):
        self.layout, self.tool = layout, tool  # tool: the host tool's path, which runs a job's unit (`job run ID`)
        self.data = Path(layout.data_dir)
        self.dir = Path(layout.jobs)

    def _dir(self, jid: str) -> Path:
        if not jid or "/" in jid or jid.startswith("."):
            raise Fail(f"bad job id {jid!r}")
        return self.dir / jid

    def active(self) -> str | None:
        jid = release_state.active_job_id(self.layout)  # job_status asks systemd itself
        return jid if jid and self.status(jid)["state"] == "running" else None

    def status(self, jid: str, log_lines: int = 0) -> dict:
        d = self._dir(jid)
        spec = read_json(d / "job.json")
        if spec is None:
            raise Fail(f"no job {jid} on this host")
        state = self._state(jid) or {"state": "starting"}
        out = {"id": jid, "key": spec["key"], **state, "progress": read_json(d / "progress.json") or {}}
        if out["state"] in ("starting", "running"):
            unit = sh("systemctl", "is-active", f"{JOB_UNIT_PREFIX}{jid}", check=False).stdout.strip()
            if unit in ("active", "activating", "deactivating"):
                out["state"] = "running"
            elif (ended := self._state(jid) or {}).get("state") in ("ok", "failed"):
                out.update(ended)  # it recorded its end and left between the two reads
            else:
                # the unit is gone and the job never recorded an end: it was killed (or the host rebooted)
                out.update(state="lost",
                           message=f"job {jid} ({spec['key']}) ended without a result (unit {unit or 'gone'})")
        if log_lines or out["state"] in ("failed", "lost"):
            out["log_tail"] = "\n".join(out.pop("tail", None) or []) or tail(d / "log", log_lines or 15)
        out.pop("tail", None)
        return out

    def start(self, key: str, argv: list[str], env: dict[str, str]) -> dict:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as lockf:
            fcntl.flock(lockf, fcntl.LOCK_EX)
            active = self.active()
            if active:
                spec = read_json(self.dir / active / "job.json") or {}
                if spec.get("key") == key:
                    return {"id": active, "state": "attached"}
                return {"id": active, "state": "busy", "key": spec.get("key")}
            jid = time.strftime("%Y%m%d-%H%M%S-", time.gmtime()) + uuid.uuid4().hex[:6]
            d = self._dir(jid)
            d.mkdir(mode=0o700)
            atomic_write(d / "job.json",
                         json.dumps({"key": key, "argv": argv, "env": env, "created": now_iso()}) + "\n", 0o600)
            atomic_write(self.dir / "active", jid + "\n", 0o600)
            proc = sh("systemd-run", f"--unit={JOB_UNIT_PREFIX}{jid}", f"--description=specfleet job {key}", "--quiet",
                      "--collect", "--property=KillMode=mixed", sys.executable, self.tool,
                      "--data-dir", str(self.data), "job", "run", jid, check=False)
            if proc.returncode != 0:
                atomic_write(d / "state.json",
                             json.dumps({"state": "failed", "exit": proc.returncode,
                                         "message": f"systemd-run failed: {proc.stderr.strip()}"}) + "\n")
                raise Fail(f"cannot start job {key}: systemd-run failed: {proc.stderr.strip()}")
            self._forget_old()
            return {"id": jid, "state": "started"}

    def run(self, jid: str) -> int:
        """Inside the transient unit: run the job's argv, log its output, record the result.

        The output is also kept in memory and the result falls back to /run (tmpfs) when the data disk is
        full, so a job that failed for lack of space still reports why."""
        d = self._dir(jid)
        spec = read_json(d / "job.json")
        started = time.time()
        self._set_state(jid, {"state": "running", "pid": os.getpid(), "started": started})
        recent: deque[str] = deque(maxlen=200)
        with open(d / "log", "a", encoding="utf-8", errors="replace") as log:
            def note(line: str) -> None:
                recent.append(line.rstrip("\n"))
                try:
                    log.write(line if line.endswith("\n") else line + "\n")
                    log.flush()
                except OSError:
                    pass  # disk full: the line is still in `recent`

            note(f"== {now_iso()} job {jid}: {spec['key']}")
            env = {**os.environ, **spec.get("env", {}), "SPECFLEET_PROGRESS_FILE": str(d / "progress.json")}
            try:
                child = subprocess.Popen(spec["argv"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True, errors="replace")
                for line in child.stdout:
                    note(line)
                rc = child.wait()
            except OSError as exc:
                note(f"cannot run {spec['argv'][0]}: {exc}")
                rc = 127
            errors = [ln for ln in recent if ln.startswith(("specfleet-host:", "fetch-model:"))]
            message = (errors[-1] if errors else (recent[-1] if recent else "")) if rc else ""
            note(f"== {now_iso()} job {jid} {'ok' if rc == 0 else 'failed'} (exit {rc}) "
                 f"in {time.time() - started:.1f}s")
        self._set_state(jid, {"state": "ok" if rc == 0 else "failed", "exit": rc, "started": started,
                                  "ended": time.time(), "message": message, "tail": list(recent)[-15:]})
        return rc

    def _set_state(self, jid: str, state: dict) -> None:
        text = json.dumps(state) + "\n"
        try:
            atomic_write(self.dir / jid / "state.json", text, 0o600)
            Path(Layout.job_run_state(jid)).unlink(missing_ok=True)
        except OSError:
            atomic_write(Path(Layout.job_run_state(jid)), text, 0o600)  # data disk full

    def _state(self, jid: str) -> dict | None:
        return read_json(Path(Layout.job_run_state(jid))) or read_json(self.dir / jid / "state.json")

    def _forget_old(self) -> None:
        dirs = sorted((p for p in self.dir.iterdir() if p.is_dir()), key=lambda p: p.name)
        for old in dirs[:-JOB_KEEP]:
            state = self._state(old.name) or {}
            if state.get("state") in ("ok", "failed"):
                shutil.rmtree(old, ignore_errors=True)
