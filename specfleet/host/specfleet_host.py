#!/usr/bin/env python3
"""specfleet-host: the on-host half of specfleet (installed by the deploy as <data_dir>/bin/specfleet-host).

Runs with the host's system python3 (stdlib only). Every subcommand prints plain lines for the operator
and exits non-zero with one clear line on failure.

  switch ID          make release ID current: refs/main, unit (daemon-reload only if it changed),
                     `current` link, enable, restart. Records the release it replaced in `previous`.
  gate [--revert]    readiness gate for the current release: /health 200 within the release's timeout
                     (connection refused while loading is normal), then the smoke completion must return
                     non-empty text. On failure prints the unit's last journal lines; with --revert it
                     switches back to `previous` and gates that, and still exits 1.
  status             JSON: current, previous, releases (newest first), unit state, container start time.
  prune --keep N     delete releases beyond the N newest (never current/previous), then drafts and model
                     snapshots/blobs that no kept release uses.
  unlock [--force]   release the rollout lock (<data_dir>/lock) left by a rollout that died.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


class Fail(Exception):
    pass


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, text=True, capture_output=True)
    if check and proc.returncode != 0:
        raise Fail(f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:] or ['']}")
    return proc


def atomic_write(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write only if the content differs; returns whether it changed."""
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


class Host:
    def __init__(self, data_dir: str):
        self.data = Path(data_dir)
        self.releases = self.data / "releases"
        self.current_link = self.data / "current"
        self.previous_file = self.data / "previous"
        self.hub = self.data / "hf" / "hub"

    # ---- releases ------------------------------------------------------------------------------
    def record(self, rid: str) -> dict:
        path = self.releases / rid / "release.json"
        if not path.exists():
            raise Fail(f"release {rid} not found on this host ({path} missing)")
        return json.loads(path.read_text())

    def current(self) -> str | None:
        try:
            return os.path.basename(os.readlink(self.current_link))
        except OSError:
            return None

    def previous(self) -> str | None:
        try:
            rid = self.previous_file.read_text().strip()
        except OSError:
            return None
        return rid if rid and (self.releases / rid / "release.json").exists() else None

    def all_records(self) -> list[dict]:
        out = []
        for path in self.releases.glob("*/release.json"):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return sorted(out, key=lambda r: (r.get("created", ""), r["id"]), reverse=True)

    # ---- switch --------------------------------------------------------------------------------
    def check_complete(self, rec: dict) -> None:
        rdir = self.releases / rec["id"]
        for name in ("extra-llm-api-config.yml", "smoke.json", f"{rec['service']}.service"):
            if not (rdir / name).is_file():
                raise Fail(f"release {rec['id']} is incomplete: {name} missing")
        target = rec["models"]["target"]
        snap = self.hub / f"models--{target['repo'].replace('/', '--')}" / "snapshots" / target["commit"]
        if not snap.is_dir():
            raise Fail(f"release {rec['id']} needs {target['repo']}@{target['commit'][:12]}, not in the cache")
        if "draft" in rec["models"] and not (rdir / "draft").is_dir():
            raise Fail(f"release {rec['id']} is incomplete: its draft model dir is missing")

    def switch(self, rid: str) -> None:
        rec = self.record(rid)
        self.check_complete(rec)
        service = rec["service"]
        old = self.current()
        if old and old != rid:
            atomic_write(self.previous_file, old + "\n")
        for model in rec["models"].values():
            ref = self.hub / f"models--{model['repo'].replace('/', '--')}" / "refs" / "main"
            if atomic_write(ref, model["commit"]):
                print(f"refs/main of {model['repo']} -> {model['commit'][:12]}")
        unit_src = (self.releases / rid / f"{service}.service").read_text()
        unit_dst = Path(f"/etc/systemd/system/{service}.service")
        if atomic_write(unit_dst, unit_src):
            sh("systemctl", "daemon-reload")
            print(f"{unit_dst} changed: daemon-reload")
        tmp = self.data / ".current.tmp"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(f"releases/{rid}", tmp)
        os.replace(tmp, self.current_link)
        if sh("systemctl", "is-enabled", service, check=False).stdout.strip() != "enabled":
            sh("systemctl", "enable", f"{service}.service")
            print(f"{service} enabled at boot")
        sh("systemctl", "reset-failed", f"{service}.service", check=False)
        atomic_write(self.data / "last-switch.json", json.dumps(
            {"from": old, "to": rid, "restarted_at": time.time(), "result": "switching"}) + "\n")
        sh("systemctl", "restart", f"{service}.service")
        image_id = sh("docker", "image", "inspect", "--format", "{{.Id}}", rec["image"], check=False).stdout.strip()
        if image_id:
            atomic_write(self.releases / rid / "image-id", image_id + "\n")
        print(f"switched {old or '(none)'} -> {rid}; restarted {service}")

    # ---- gate ----------------------------------------------------------------------------------
    def note_switch(self, **fields) -> None:
        path = self.data / "last-switch.json"
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            record = {}
        record.update(fields)
        if "ready_at" in fields and "restarted_at" in record:
            record["downtime_s"] = round(fields["ready_at"] - record["restarted_at"], 2)
        atomic_write(path, json.dumps(record) + "\n")

    def gate(self, revert: bool, timeout: int | None = None) -> None:
        rid = self.current()
        if rid is None:
            raise Fail("no current release to gate")
        rec = self.record(rid)
        if timeout:
            rec["gate"]["health_timeout_sec"] = timeout
        try:
            elapsed, text = self._gate_once(rec)
            self.note_switch(ready_at=time.time(), result="ready")
        except Fail as exc:
            self.note_switch(result="failed gate")
            print(f"readiness gate FAILED for {rid}: {exc}", file=sys.stderr)
            print(f"last journal lines of {rec['service']}:", file=sys.stderr)
            print(journal_tail(rec["service"]), file=sys.stderr)
            prev = self.previous()
            if revert and prev and prev != rid:
                print(f"reverting to previous release {prev}", file=sys.stderr)
                try:
                    self.switch(prev)
                    prev_rec = self.record(prev)
                    if timeout:
                        prev_rec["gate"]["health_timeout_sec"] = timeout
                    self._gate_once(prev_rec)
                    self.note_switch(ready_at=time.time(), result=f"rolled back: {rid} failed its gate")
                    # The failed release must not be "previous" of the restored one.
                    self.previous_file.unlink(missing_ok=True)
                    raise Fail(f"{rid} failed its readiness gate ({exc}); rolled back to {prev}, which is serving")
                except Fail as exc2:
                    if "rolled back" in str(exc2):
                        raise
                    raise Fail(f"{rid} failed its readiness gate ({exc}); rollback to {prev} ALSO failed: {exc2}") from None
            raise Fail(f"{rid} failed its readiness gate: {exc}") from None
        print(f"{rid} ready after {elapsed:.1f}s; smoke completion returned {len(text)} characters")

    def _gate_once(self, rec: dict) -> tuple[float, str]:
        gate, url, service = rec["gate"], rec["url"], rec["service"]
        start = time.monotonic()
        deadline = start + gate["health_timeout_sec"]
        restarts0 = n_restarts(service)
        last = "no answer yet"
        while True:
            state = sh("systemctl", "is-active", service, check=False).stdout.strip()
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
                raise Fail(f"/health not 200 within {gate['health_timeout_sec']}s (last: {last})")
            time.sleep(gate["health_interval_sec"])
        body = (self.releases / rec["id"] / "smoke.json").read_bytes()
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

    # ---- status / prune / lock ------------------------------------------------------------------
    def status(self) -> dict:
        cur = self.current()
        service = self.record(cur)["service"] if cur and (self.releases / cur / "release.json").exists() else None
        started = None
        if service:
            started = sh("docker", "inspect", "--format", "{{.State.StartedAt}}", service, check=False).stdout.strip() or None
        return {
            "current": cur, "previous": self.previous(),
            "releases": self.all_records(),
            "active": sh("systemctl", "is-active", service, check=False).stdout.strip() if service else None,
            "container_started_at": started,
            "lock": self.lock_owner(),
            "last_switch": self.last_switch(),
        }

    def last_switch(self) -> dict | None:
        try:
            return json.loads((self.data / "last-switch.json").read_text())
        except (OSError, ValueError):
            return None

    def prune(self, keep: int) -> None:
        records = self.all_records()
        protect = {self.current(), self.previous()}
        kept = [r for r in records if r["id"] in protect]
        for r in records:
            if len(kept) >= keep:
                break
            if r not in kept:
                kept.append(r)
        kept_ids = {r["id"] for r in kept}
        for r in records:
            if r["id"] not in kept_ids:
                shutil.rmtree(self.releases / r["id"], ignore_errors=True)
                print(f"pruned release {r['id']}")
        used = {(m["repo"], m["commit"]) for r in kept for m in r["models"].values()}
        drafts = self.data / "drafts"
        for d in drafts.glob("*/*"):
            if (d.parent.name.replace("--", "/", 1), d.name) not in used:
                shutil.rmtree(d, ignore_errors=True)
                print(f"pruned draft dir {d}")
        for repo_dir in self.hub.glob("models--*"):
            repo = repo_dir.name[len("models--"):].replace("--", "/", 1)
            keep_commits = {c for r, c in used if r == repo}
            if not keep_commits:
                shutil.rmtree(repo_dir, ignore_errors=True)
                print(f"pruned model {repo} (no kept release uses it)")
                continue
            for snap in (repo_dir / "snapshots").glob("*"):
                if snap.name not in keep_commits:
                    shutil.rmtree(snap, ignore_errors=True)
                    print(f"pruned snapshot {repo}@{snap.name[:12]}")
            live = {os.path.realpath(p) for p in (repo_dir / "snapshots").rglob("*") if p.is_symlink()}
            for blob in (repo_dir / "blobs").glob("*"):
                if str(blob.resolve()) not in live and not blob.name.endswith(".incomplete"):
                    blob.unlink()
                    print(f"pruned blob {repo}/{blob.name[:16]}")

    def lock_owner(self) -> str | None:
        try:
            return (self.data / "lock" / "owner").read_text().strip()
        except OSError:
            return None

    def unlock(self, owner: str | None) -> None:
        holder = self.lock_owner()
        if holder and owner and holder.split()[0] != owner:
            raise Fail(f"not unlocking: held by {holder}")
        shutil.rmtree(self.data / "lock", ignore_errors=True)


def n_restarts(service: str) -> int:
    out = sh("systemctl", "show", "-p", "NRestarts", "--value", service, check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def journal_tail(service: str, lines: int = 30) -> str:
    out = sh("journalctl", "-u", service, "-n", str(lines), "--no-pager", "-o", "cat", check=False)
    return out.stdout.rstrip() or "(journal empty)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specfleet-host", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parent.parent))
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("switch").add_argument("release")
    gate_p = sub.add_parser("gate")
    gate_p.add_argument("--revert", action="store_true")
    gate_p.add_argument("--timeout", type=int, help="override the release's health_timeout_sec")
    sub.add_parser("status")
    sub.add_parser("prune").add_argument("--keep", type=int, required=True)
    un = sub.add_parser("unlock")
    un.add_argument("owner", nargs="?")
    un.add_argument("--force", action="store_true")
    sub.add_parser("previous")
    args = ap.parse_args(argv)
    host = Host(args.data_dir)
    try:
        if args.cmd == "switch":
            host.switch(args.release)
        elif args.cmd == "gate":
            host.gate(args.revert, args.timeout)
        elif args.cmd == "status":
            print(json.dumps(host.status(), indent=1))
        elif args.cmd == "prune":
            host.prune(args.keep)
        elif args.cmd == "unlock":
            host.unlock(None if args.force else args.owner)
        elif args.cmd == "previous":
            print(host.previous() or "")
    except Fail as exc:
        print(f"specfleet-host: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
