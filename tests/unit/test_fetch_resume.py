"""fetch-model (specfleet/serving/host/fetch_model.py) against the Hugging Face Hub STAND-IN, in-process, no VM.

The tool runs as a subprocess, as on a host: `python3 fetch_model.py --repo R --commit C --cache-dir D` with
HF_ENDPOINT pointing at the stand-in and the token only in a file named by HF_TOKEN_PATH.

FETCH_MODEL_TOOL=/path/to/fetch_model.py runs these tests against another version of the tool (e.g. the one
before resume: `git show HEAD~N:specfleet/serving/host/fetch_model.py > /tmp/old.py`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin  # noqa: E402

TOOL = Path(os.environ.get("FETCH_MODEL_TOOL") or REPO_ROOT / "specfleet/serving/host/fetch_model.py")
GATED = "nvidia/Llama-3.3-70B-Instruct-FP4"  # 12 files, two shards of 1.5 and 1 MiB
LLAMA8B = "nvidia/Llama-3.1-8B-Instruct-FP4"  # 10 files, one 2 MiB shard
KiB = 1024
# Granularity of both byte counters compared below: fetch-model makes http_get write in 256 KiB chunks
# (constants.DOWNLOAD_CHUNK_SIZE; httpx holds a chunk in memory until it is complete, so a kill loses < 1 chunk),
# and the stand-in sends bodies in pieces of <= 256 KiB (12.8 KiB when throttled at 256 KiB/s) and counts a piece
# as served just before writing it. So one 256 KiB chunk per interrupted file bounds what a kill can lose, and
# what a re-run may fetch beyond the bytes missing on disk.
CHUNK = 256 * KiB
IN_FLIGHT = 128 * KiB  # served (counted by the stand-in) but still in socket buffers when the kill lands


def storage(cache: Path, repo: str) -> Path:
    return cache / f"models--{repo.replace('/', '--')}"


def tool_env(tmp_path: Path, hub: HubStandin, **extra: str) -> dict:
    token = tmp_path / "hf-token"
    token.write_text(STANDIN_TOKEN + "\n")
    token.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_ENDPOINT=hub.url, HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_TOKEN_PATH=str(token), HF_HOME=str(tmp_path / "hf-home"))
    env.update(extra)
    return env


def cmd(repo: str, cache: Path, commit: str | None = None, *extra: str) -> list[str]:
    return [sys.executable, str(TOOL), "--repo", repo, "--commit", commit or HubStandin.commit(repo),
            "--cache-dir", str(cache), *extra]


def run(repo: str, cache: Path, env: dict, *extra: str, commit: str | None = None, timeout: float = 60):
    return subprocess.run(cmd(repo, cache, commit, *extra), env=env, capture_output=True, text=True, timeout=timeout)


def assert_complete(cache: Path, repo: str) -> None:
    snap = storage(cache, repo) / "snapshots" / HubStandin.commit(repo)
    for path, size in HubStandin.files(repo).items():
        p = snap / path
        assert p.is_symlink(), path
        assert os.readlink(p) == "../" * (path.count("/") + 2) + "blobs/" + os.path.basename(os.readlink(p))
        want = HubStandin.file_bytes(repo, path)
        assert hashlib.sha256(p.read_bytes()).hexdigest() == hashlib.sha256(want).hexdigest(), path
        assert p.stat().st_size == size


def assert_consistency_pass_downloaded_nothing(hub: HubStandin, repo: str) -> None:
    """snapshot_download's tree listing comes last: no HEAD/GET of a file may follow it."""
    reqs = hub.requests()
    tree = [i for i, (_, path, _) in enumerate(reqs) if path.startswith(f"/api/models/{repo}/tree/")]
    assert tree, reqs
    after = [r for r in reqs[tree[-1]:] if "/resolve/" in r[1]]
    assert after == [], f"the final snapshot_download pass fetched {after}: the cache layout is wrong"


def wait_for(cond, timeout: float, proc: subprocess.Popen | None = None, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"fetch-model exited ({proc.returncode}) before {what}: {out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def on_disk(blobs: Path, etag: str, size: int) -> int:
    """Bytes of one blob already on disk: complete blob, else the largest partial file of any client."""
    if (blobs / etag).exists():
        return size
    partials = [blobs / f"{etag}.specfleet-partial", *blobs.glob(f"{etag}.*.incomplete")]
    return max([min(p.stat().st_size, size) for p in partials if p.exists()] or [0])


def test_resume_after_sigkill_downloads_only_what_is_missing(tmp_path):
    cache = tmp_path / "cache"
    sha = HubStandin.commit(GATED)
    weights = {p: s for p, s in HubStandin.files(GATED).items() if p.endswith(".safetensors")}
    key = {p: f"/{GATED}/resolve/{sha}/{p}" for p in weights}
    etag = {p: HubStandin.file_meta(GATED, p)["lfs"]["sha256"] for p in weights}
    repo_bytes = HubStandin.repo_size(GATED)
    blobs = storage(cache, GATED) / "blobs"
    with HubStandin(throttle_bps=256 * KiB) as hub:
        env = tool_env(tmp_path, hub)
        proc = subprocess.Popen(cmd(GATED, cache), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:  # kill as soon as more than half of one weight file was served
            wait_for(lambda: any(hub.bytes_served().get(key[p], 0) > s // 2 for p, s in weights.items()), 30, proc,
                     "half of a weight file was served")
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.communicate(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        assert hub.wait_idle(10)
        first = {p: hub.bytes_served().get(key[p], 0) for p in weights}
        assert 0 < sum(first.values()) < sum(weights.values()), first  # killed mid-weights

        disk = {p: on_disk(blobs, etag[p], s) for p, s in weights.items()}
        interrupted = [p for p in weights if first[p] > 0 and disk[p] < weights[p]]
        missing = sum(weights[p] - disk[p] for p in weights)
        assert interrupted
        hub.set_throttle(None)
        hub.reset_log()
        out = run(GATED, cache, env)
        assert out.returncode == 0, out.stderr
        again = {p: hub.bytes_served().get(key[p], 0) for p in weights}
        rerun = sum(again.values())
        print(f"\nkilled after {sum(first.values())} weight bytes served ({sum(disk.values())} on disk); re-run served "
              f"{rerun} weight bytes ({hub.total_bytes()} in all) of {sum(weights.values())} weight bytes "
              f"({repo_bytes} repo bytes); tool {TOOL}")
        print(out.stdout.strip())
        # 1. the re-run fetches only what was not on disk (+ one chunk per interrupted file)
        assert rerun <= missing + CHUNK * len(interrupted), (again, disk)
        # 2. ... and what the first run received reached the disk: bytes sent twice <= one chunk per interrupted file
        for p in interrupted:
            assert again[p] <= weights[p] - first[p] + CHUNK + IN_FLIGHT, (
                f"{p}: {first[p]} bytes were served before the kill, yet the re-run fetched {again[p]} of "
                f"{weights[p]}: the interrupted download was not resumed")
        assert "resumed" in out.stdout
        assert_complete(cache, GATED)
        assert_consistency_pass_downloaded_nothing(hub, GATED)
        assert not list(blobs.glob("*.specfleet-partial*")), list(blobs.iterdir())


def test_foreign_partial_files_survive_and_same_blob_waits_for_lock(tmp_path):
    cache = tmp_path / "cache"
    sha = HubStandin.commit(GATED)
    blobs = storage(cache, GATED) / "blobs"
    blobs.mkdir(parents=True)
    shard = "model-00001-of-00002.safetensors"
    shard_etag = HubStandin.file_meta(GATED, shard)["lfs"]["sha256"]
    # another process's huggingface_hub download of the same blob, and another blob's specfleet partial
    theirs = blobs / f"{shard_etag}.0123456789abcdef0123456789abcdef.incomplete"
    theirs.write_bytes(b"x" * 1000)
    other = blobs / f"{'ab' * 32}.specfleet-partial"
    other.write_bytes(b"y" * 2000)
    with HubStandin() as hub:
        env = tool_env(tmp_path, hub)
        lock_path = blobs / f"{shard_etag}.specfleet-partial.lock"
        with open(lock_path, "a+b") as lock:  # a concurrent fetch of that shard holds its lock
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            proc = subprocess.Popen(cmd(GATED, cache), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            snap = storage(cache, GATED) / "snapshots" / sha
            n = len(HubStandin.files(GATED))
            wait_for(lambda: snap.is_dir() and len(list(snap.iterdir())) == n - 1, 30, proc, "all other files")
            time.sleep(0.5)  # it really waits: still running, the shard neither fetched nor linked
            assert proc.poll() is None
            assert not (snap / shard).exists()
            assert hub.bytes_served().get(f"/{GATED}/resolve/{sha}/{shard}", 0) == 0
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert_complete(cache, GATED)
        assert hub.bytes_served()[f"/{GATED}/resolve/{sha}/{shard}"] == HubStandin.files(GATED)[shard]
    assert theirs.read_bytes() == b"x" * 1000
    assert other.read_bytes() == b"y" * 2000


def test_hub_429_for_a_while_then_success(tmp_path):
    cache = tmp_path / "cache"
    with HubStandin() as hub:
        env = tool_env(tmp_path, hub)
        hub.fail_next(429, 6)
        t0 = time.monotonic()
        out = run(GATED, cache, env)
        took = time.monotonic() - t0
        assert out.returncode == 0, out.stderr
        assert sum(1 for r in hub.requests() if r[2] == 429) == 6
        assert hub.pending_failures() == 0
        assert_complete(cache, GATED)
        assert_consistency_pass_downloaded_nothing(hub, GATED)
        print(f"\n429 x6: fetch took {took:.1f}s\n{out.stdout}")
        assert took < 30


def test_hub_500_on_api_is_retried(tmp_path):
    cache = tmp_path / "cache"
    with HubStandin() as hub:
        env = tool_env(tmp_path, hub)
        hub.fail_next(500, 2, paths="api")  # model_info itself does not retry in huggingface_hub 2.4.0
        out = run(LLAMA8B, cache, env)
        assert out.returncode == 0, out.stderr
        assert [r for r in hub.requests() if r[2] == 500][0][1] == f"/api/models/{LLAMA8B}/revision/" \
                                                                   f"{HubStandin.commit(LLAMA8B)}"
        assert out.stdout.count("retry ") == 2, out.stdout
        assert_complete(cache, LLAMA8B)


def test_wrong_commit_fails_fast_with_one_line(tmp_path):
    with HubStandin() as hub:
        env = tool_env(tmp_path, hub)
        t0 = time.monotonic()
        out = run(GATED, tmp_path / "cache", env, commit="0" * 40)
        assert out.returncode == 1
        assert time.monotonic() - t0 < 15
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"fetch-model: {GATED}@000000000000: 404"), out.stderr
        assert "Traceback" not in out.stderr
        assert [r[2] for r in hub.requests()] == [404]  # not retried


def test_gated_without_token_is_not_retried(tmp_path):
    with HubStandin() as hub:
        env = tool_env(tmp_path, hub, HF_TOKEN_PATH=str(tmp_path / "no-such-token"))
        out = run(GATED, tmp_path / "cache", env)
        assert out.returncode == 1
        assert len(out.stderr.strip().splitlines()) == 1 and " 401 " in out.stderr, out.stderr
        failed = [r[1] for r in hub.requests() if r[2] == 401]
        assert failed and len(failed) == len(set(failed))  # each file asked once


def test_progress_file(tmp_path):
    cache = tmp_path / "cache"
    progress = tmp_path / "progress" / "fetch.json"
    total = HubStandin.repo_size(GATED)
    with HubStandin(throttle_bps=512 * KiB) as hub:
        env = tool_env(tmp_path, hub, SPECFLEET_PROGRESS_FILE=str(progress))
        proc = subprocess.Popen(cmd(GATED, cache), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = []

        def mid_fetch():
            if progress.exists():
                obj = json.loads(progress.read_text())  # written atomically: never a torn read
                if not seen or seen[-1] != obj:
                    seen.append(obj)
                return 0 < obj["bytes_done"] < obj["bytes_total"]
            return False

        try:
            wait_for(mid_fetch, 30, proc, "a progress report mid-fetch")
        finally:
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    final = json.loads(progress.read_text())
    print(f"\nprogress reports seen: {seen}\nfinal: {final}")
    mid = seen[-1]
    assert mid["kind"] == "fetch" and mid["repo"] == GATED and mid["commit"] == HubStandin.commit(GATED)
    assert mid["bytes_total"] == total and mid["files_total"] == len(HubStandin.files(GATED))
    assert mid["files_done"] < mid["files_total"]
    assert set(final) >= {"kind", "repo", "commit", "files_total", "files_done", "bytes_total", "bytes_done",
                          "rate_bps", "eta_s", "updated"}
    assert final["bytes_done"] == final["bytes_total"] == total
    assert final["files_done"] == final["files_total"]
    assert final["rate_bps"] > 0 and final["eta_s"] == 0
    assert abs(final["updated"] - time.time()) < 60
    assert not list(progress.parent.glob("*.tmp"))
