"""hostlib: small helpers shared by specfleet's host programs (stdlib only; installed next to them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from layout import cache_folder, repo_of_cache_folder


class Fail(Exception):
    pass


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, text=True, capture_output=True)
    if check and proc.returncode != 0:
        detail = ((proc.stderr or proc.stdout).strip().splitlines() or [""])[-1]
        raise Fail(f"{' '.join(cmd)} failed: {detail}")
    return proc


def say(*lines: str, err: bool = False) -> None:
    """Print to the job log / terminal; a vanished reader (SSH session gone) never stops the work."""
    try:
        print(*lines, sep="\n", file=sys.stderr if err else sys.stdout, flush=True)
    except (BrokenPipeError, OSError):
        pass


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


def read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Progress:
    """The progress file a job's controller reads (SPECFLEET_PROGRESS_FILE, set by `job run`)."""

    def __init__(self):
        path = os.environ.get("SPECFLEET_PROGRESS_FILE")
        self.path = Path(path) if path else None

    def __call__(self, **fields) -> None:
        if self.path is not None:
            atomic_write(self.path, json.dumps({**fields, "updated": time.time()}) + "\n", 0o600)


def poll_until(read, done, wait: float, every: float = 0.25, clock=time.monotonic, sleep=time.sleep):
    """read() until done(its value) or `wait` seconds have passed; the last value read. Lets a controller's one SSH
    command wait on the host (`job status --wait`) instead of asking again and again, and hear of an end at once."""
    deadline = clock() + wait
    while True:
        value = read()
        if done(value) or clock() >= deadline:
            return value
        sleep(min(every, max(0.0, deadline - clock())))


def tail(path: Path, lines: int) -> str:
    try:
        data = path.read_bytes()[-65536:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def prune_unused(hub: Path, drafts: Path, used: set[tuple[str, str]]) -> None:
    """Delete draft dirs, model snapshots, blobs and whole models that no (repo, commit) in `used` needs."""
    for d in drafts.glob("*/*"):
        if (d.parent.name.replace("--", "/", 1), d.name) not in used:
            shutil.rmtree(d, ignore_errors=True)
            say(f"pruned draft dir {d}")
    for repo_dir in hub.glob(cache_folder("*")):
        repo = repo_of_cache_folder(repo_dir.name)
        keep_commits = {c for r, c in used if r == repo}
        if not keep_commits:
            shutil.rmtree(repo_dir, ignore_errors=True)
            say(f"pruned model {repo} (no kept release uses it)")
            continue
        for snap in (repo_dir / "snapshots").glob("*"):
            if snap.name not in keep_commits:
                shutil.rmtree(snap, ignore_errors=True)
                say(f"pruned snapshot {repo}@{snap.name[:12]}")
        live = {os.path.realpath(p) for p in (repo_dir / "snapshots").rglob("*") if p.is_symlink()}
        for blob in (repo_dir / "blobs").glob("*"):
            if blob.name.endswith((".incomplete", ".specfleet-partial", ".lock")):
                continue  # a fetch may own it (jobs are serialized, but a manual fetch is not)
            if str(blob.resolve()) not in live:
                blob.unlink()
                say(f"pruned blob {repo}/{blob.name[:16]}")
