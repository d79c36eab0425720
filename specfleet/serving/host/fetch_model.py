#!/usr/bin/env python3
"""fetch-model: download one model at a pinned commit into the host's Hugging Face cache.

Installed by specfleet as <data_dir>/bin/fetch-model and run with <data_dir>/venv/bin/python (which has the
pinned huggingface_hub). The token is never on the command line: huggingface_hub reads it from the root-only
file named by HF_TOKEN_PATH. Complete files are never downloaded again, and a file whose download was
interrupted (killed, rebooted, network gone) RESUMES from the bytes already on disk. With --link-dir, the
snapshot is also materialised as a directory of hard links (real files, no extra space) at a stable path that a
container can bind-mount read-only.

How, per file of the snapshot (after --ignore) that is not in the cache yet, `--workers` files in parallel:
  1. one HEAD (hf_hub_url + get_hf_file_metadata) gives the etag, size and download location;
  2. under an exclusive fcntl.flock on blobs/<etag>.specfleet-partial.lock (a concurrent fetch of the same blob,
     from this or another process, waits instead of interleaving writes), huggingface_hub's own
     file_download.http_get appends to the stable partial file blobs/<etag>.specfleet-partial, sending
     `Range: bytes=<its size>-` when it is not empty;
  3. the partial is verified (sha256 == etag for LFS files, whose etag IS the sha256; size for the others),
     moved atomically (os.replace) to blobs/<etag>, and the snapshot entry is created exactly as huggingface_hub
     lays out its cache: a relative symlink snapshots/<commit>/<path> -> ../../blobs/<etag> (one more ../ per
     directory level of <path>), refs/<revision> only when --commit was not a commit sha.
Finally snapshot_download() runs with the arguments this tool always passed it, as a consistency pass: it must
find every file and download nothing; if it changes any blob or snapshot entry of ours, the layout was wrong and
the fetch fails. Partial files that are not ours (huggingface_hub's `*.<uuid>.incomplete` of a
concurrent download, another blob's `.specfleet-partial`) are never touched.

Why Range resume through huggingface_hub's http_get rather than:
  - pinning an older huggingface_hub that resumed a shared `blobs/<etag>.incomplete`: it would freeze the host
    client releases behind the one the controller and the cache format (2.x tree listings, redirect and
    Xet-era Hub handling) are tested with, and go against what upstream chose on purpose (process-unique temp
    files, so that cache correctness never depends on its best-effort lock); we keep the current client and add
    only the resume it dropped;
  - hf_transfer / aria2 / curl or another client: one more native dependency on every Spark and every mirror
    setup, with its own auth, redirect, proxy and retry behaviour to audit, and no notion of the Hub cache
    layout; hf_transfer cannot resume at all (huggingface_hub fell back to http_get when resume_size > 0) and is
    deprecated in favour of hf_xet. http_get is the client's own download loop (auth headers, CDN redirects,
    429 back-off, in-stream reconnects with Range) and resuming only needs a stable file and `resume_size`.
  Cost: we reproduce ~30 lines of cache layout (blob name, symlink, ref), which the final snapshot_download pass
  checks on every run.

Hub errors: huggingface_hub 2.4.0 retries 429 in http_get (6 requests, Retry-After+1 s apart) but not 500;
get_hf_file_metadata and model_info retry nothing. So each step here is retried up to 8 times, 1 s doubling to
30 s (or the server's Retry-After), one printed line per retry, for 408/429/5xx and network errors; 401, 403 and
404 are not retried.

Progress: with SPECFLEET_PROGRESS_FILE set, a JSON object {"kind": "fetch", "repo", "commit", "files_total",
"files_done", "bytes_total", "bytes_done", "rate_bps", "eta_s", "updated"} is written there (tmp + os.replace)
at most every 2 s and once at the end. bytes_done counts bytes on disk (complete blobs + partial files), so a
resumed fetch starts from what is already there; rate_bps counts only this run's downloads.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PARTIAL_SUFFIX = ".specfleet-partial"
# http_get writes what it receives in chunks of constants.DOWNLOAD_CHUNK_SIZE (10 MiB by default): httpx holds a
# whole chunk in memory before it reaches the partial file, so a killed fetch loses up to one chunk per file in
# flight. 256 KiB keeps that loss small at no measurable cost (~4000 writes per GB).
CHUNK_SIZE = 256 * 1024
MAX_ATTEMPTS = 8
BACKOFF_FIRST, BACKOFF_MAX, RETRY_AFTER_MAX = 1.0, 30.0, 300.0
PROGRESS_EVERY = 2.0
NO_RETRY_STATUS = (401, 403, 404)


class FetchError(Exception):
    """A failure to report as one line (no traceback)."""


def _status(exc: BaseException) -> int | None:
    resp = getattr(exc, "response", None)
    return getattr(resp, "status_code", None)


def _retry_after(exc: BaseException) -> float | None:
    resp = getattr(exc, "response", None)
    value = (getattr(resp, "headers", None) or {}).get("Retry-After")
    if value and str(value).strip().isdigit():
        return min(float(value), RETRY_AFTER_MAX)
    return None


def _one_line(exc: BaseException, limit: int = 400, url: bool = True) -> str:
    """The error as one line: huggingface_hub's messages put the status on line 1 and the reason on lines 2-3."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:3])
    if not url:
        text = re.sub(r" for url:? \S+?\.?(?= |$)", ".", text)
    if not isinstance(exc, FetchError) and _status(exc) is None:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _retryable(exc: BaseException) -> bool:
    import httpx2  # huggingface_hub 2.x's HTTP client
    from huggingface_hub.errors import HfHubHTTPError

    status = _status(exc)
    if isinstance(exc, HfHubHTTPError) or status is not None:
        return status is not None and (status in (408, 429) or 500 <= status <= 599)
    if isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError, _Corrupt)):
        return True
    # http_get's "Consistency check failed: file should be of size ..." (connection cut short) is an OSError
    return isinstance(exc, OSError) and "Consistency check failed" in str(exc)


class _Corrupt(Exception):
    """The downloaded bytes do not match the etag: the partial was removed, the next attempt starts over."""


class Fetcher:
    def __init__(self, args: argparse.Namespace):
        from huggingface_hub import constants
        from huggingface_hub.file_download import repo_folder_name

        self.args = args
        self.label = f"{args.repo}@{args.commit[:12]}"
        self.endpoint = constants.ENDPOINT
        self.cache_dir = Path(args.cache_dir).expanduser().resolve()  # as snapshot_download does
        self.storage = self.cache_dir / repo_folder_name(repo_id=args.repo, repo_type="model")
        self.blobs = self.storage / "blobs"
        self.commit = args.commit
        self.files: list[dict] = []  # {path, size, lfs_sha256}
        self.etags: dict[str, str] = {}  # path -> etag (known once HEADed)
        self.done: set[str] = set()
        self.resumed: list[int] = []  # byte offsets resumed from
        self.downloaded = 0  # bytes written by this run
        self.lock = threading.Lock()
        self.print_lock = threading.Lock()
        self.progress_path = os.environ.get("SPECFLEET_PROGRESS_FILE") or None
        self.start = time.monotonic()
        self._last_progress = 0.0

    # -- output -------------------------------------------------------------------------------------------------

    def say(self, line: str, err: bool = False) -> None:
        with self.print_lock:
            print(line, file=sys.stderr if err else sys.stdout, flush=True)

    # -- retries ------------------------------------------------------------------------------------------------

    def retrying(self, what: str, fn):
        delay = BACKOFF_FIRST
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return fn()
            except Exception as exc:  # noqa: BLE001 - classified below
                if attempt == MAX_ATTEMPTS or not _retryable(exc) or _status(exc) in NO_RETRY_STATUS:
                    raise
                wait = _retry_after(exc)
                wait = delay if wait is None else wait
                self.say(f"fetch-model: {self.label}: {what}: {_one_line(exc, 160, url=False)}; "
                         f"retry {attempt}/{MAX_ATTEMPTS - 1} in {wait:.0f}s")
                time.sleep(wait)
                delay = min(delay * 2, BACKOFF_MAX)

    # -- layout -------------------------------------------------------------------------------------------------

    def pointer(self, path: str) -> Path:
        return self.storage / "snapshots" / self.commit / Path(*path.split("/"))

    def link(self, path: str, etag: str) -> None:
        """snapshots/<commit>/<path> -> ../../blobs/<etag> (relative, as huggingface_hub's _create_symlink)."""
        ptr = self.pointer(path)
        ptr.parent.mkdir(parents=True, exist_ok=True)
        target = os.path.relpath(self.blobs / etag, ptr.parent)
        try:
            os.symlink(target, ptr)
        except FileExistsError:  # e.g. a dangling link whose blob was pruned: replace it atomically
            if os.path.islink(ptr) and os.readlink(ptr) == target:
                return
            tmp = ptr.with_name(f".{ptr.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.unlink(missing_ok=True)
            os.symlink(target, tmp)
            os.replace(tmp, ptr)

    # -- progress -----------------------------------------------------------------------------------------------

    def bytes_on_disk(self) -> tuple[int, int]:
        """(files done, bytes on disk) over the selected files: complete ones + current partial sizes."""
        files_done, total = 0, 0
        for f in self.files:
            path, size = f["path"], f["size"]
            if path in self.done or os.path.exists(self.pointer(path)):
                files_done += 1
                total += size
                continue
            etag = self.etags.get(path) or f["lfs_sha256"] or f["blob_id"]  # the Hub's etag before the HEAD
            if etag:
                try:
                    total += min(os.stat(self.blobs / (etag + PARTIAL_SUFFIX)).st_size, size)
                except OSError:
                    pass
        return files_done, total

    def write_progress(self, final: bool = False, error: str | None = None) -> None:
        if not self.progress_path or not self.files:
            return
        now = time.monotonic()
        if not final and now - self._last_progress < PROGRESS_EVERY:
            return
        self._last_progress = now
        files_done, done = self.bytes_on_disk()
        total = sum(f["size"] for f in self.files)
        elapsed = max(now - self.start, 1e-6)
        rate = self.downloaded / elapsed
        obj = {"kind": "fetch", "repo": self.args.repo, "commit": self.commit, "files_total": len(self.files),
               "files_done": files_done, "bytes_total": total, "bytes_done": done, "rate_bps": round(rate),
               "eta_s": (round((total - done) / rate, 1) if rate > 0 else (0.0 if done >= total else None)),
               "updated": round(time.time(), 3)}
        if error:
            obj["error"] = error
        target = Path(self.progress_path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(obj) + "\n")
            os.replace(tmp, target)
        except OSError as exc:  # progress is best effort: never fail a fetch over it
            self.say(f"fetch-model: {self.label}: cannot write progress file {target}: {exc}", err=True)

    def progress_loop(self, stop: threading.Event) -> None:
        while not stop.wait(0.25):
            self.write_progress()

    # -- the fetch ----------------------------------------------------------------------------------------------

    def list_files(self) -> None:
        from huggingface_hub import HfApi
        from huggingface_hub.utils import filter_repo_objects

        api = HfApi(endpoint=self.endpoint)
        info = self.retrying("model info", lambda: api.model_info(self.args.repo, revision=self.args.commit,
                                                                 files_metadata=True))
        if info.sha and info.sha != self.args.commit:  # a branch or tag: resolved, and a ref written as hf does
            self.commit = info.sha
            self.write_ref(self.args.commit, info.sha)
        siblings = list(filter_repo_objects(info.siblings or [], ignore_patterns=self.args.ignore or None,
                                            key=lambda s: s.rfilename))
        self.files = [{"path": s.rfilename, "size": int(s.size or 0), "blob_id": s.blob_id,
                       "lfs_sha256": s.lfs.sha256 if s.lfs is not None else None} for s in siblings]

    def write_ref(self, revision: str, commit: str) -> None:
        ref = self.storage / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.exists() or ref.read_text() != commit:
            tmp = ref.with_name(f"{ref.name}.{os.getpid()}.tmp")
            tmp.write_text(commit)
            os.replace(tmp, ref)

    def fetch_file(self, f: dict) -> None:
        path = f["path"]
        if os.path.exists(self.pointer(path)):
            self.done.add(path)
            return
        self.retrying(path, lambda: self._fetch_once(f))
        with self.lock:
            self.done.add(path)

    def _fetch_once(self, f: dict) -> None:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        path = f["path"]
        url = hf_hub_url(self.args.repo, path, revision=self.commit, endpoint=self.endpoint)
        headers = build_hf_headers()  # token from HF_TOKEN_PATH, as hf_hub_download
        meta = get_hf_file_metadata(url, headers=headers, endpoint=self.endpoint)
        if not meta.etag:
            raise FetchError(f"{path}: the Hub sent no ETag")
        etag = meta.etag
        size = meta.size if meta.size is not None else f["size"]
        self.etags[path] = etag
        blob = self.blobs / etag
        self.blobs.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            location = meta.location or url
            if location != url and not _same_or_hub_host(url, location):
                headers.pop("authorization", None)  # signed CDN url: the token must not leave the Hub
            self._download(path, etag, size, location, headers, is_lfs=f["lfs_sha256"] is not None)
        self.link(path, etag)

    def _download(self, path: str, etag: str, size: int, location: str, headers: dict, is_lfs: bool) -> None:
        from huggingface_hub.file_download import http_get

        blob = self.blobs / etag
        partial = self.blobs / (etag + PARTIAL_SUFFIX)
        lock_path = self.blobs / (etag + PARTIAL_SUFFIX + ".lock")
        with open(lock_path, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # a concurrent fetch of this blob finishes first
            if blob.exists():  # ... and it did
                return
            fd = os.open(partial, os.O_RDWR | os.O_CREAT, 0o644)
            with os.fdopen(fd, "r+b") as out:
                have = out.seek(0, os.SEEK_END)
                if have > size:  # cannot be ours at this etag: start over
                    out.truncate(0)
                    out.seek(0)
                    have = 0
                if have:
                    with self.lock:
                        self.resumed.append(have)
                    self.say(f"{path}: resuming at byte {have} of {size}")
                counted = _Counting(out, self)
                http_get(location, counted, resume_size=have, headers=headers, expected_size=size,
                         displayed_filename=path)
                out.flush()
                os.fsync(out.fileno())
                got = out.seek(0, os.SEEK_END)
            if got != size:
                raise OSError(f"Consistency check failed: {path} has {got} bytes, expected {size}")
            if is_lfs:
                digest = _sha256(partial)
                if digest != etag:
                    partial.unlink(missing_ok=True)
                    raise _Corrupt(f"{path}: sha256 {digest[:12]} does not match etag {etag[:12]}; "
                                   "removed the partial file")
            os.replace(partial, blob)
            lock_path.unlink(missing_ok=True)  # safe: whoever waits on it re-checks that the blob exists

    def run(self) -> int:
        from huggingface_hub import constants

        constants.DOWNLOAD_CHUNK_SIZE = CHUNK_SIZE
        self.list_files()
        self.storage.mkdir(parents=True, exist_ok=True)
        try:  # CACHEDIR.TAG, as hf_hub_download writes it (private helper: best effort)
            from huggingface_hub._local_folder import _create_cachedir_tag
            _create_cachedir_tag(self.cache_dir)
        except Exception:  # noqa: BLE001
            pass
        stop = threading.Event()
        ticker = threading.Thread(target=self.progress_loop, args=(stop,), daemon=True)
        self.write_progress(final=True)
        ticker.start()
        try:
            todo = [f for f in self.files if not os.path.exists(self.pointer(f["path"]))]
            with ThreadPoolExecutor(max_workers=max(1, self.args.workers)) as pool:
                futures = [pool.submit(self.fetch_file, f) for f in todo]
                errors = [fut.exception() for fut in futures]
            errors = [e for e in errors if e is not None]
            if errors:
                raise errors[0]
            self.consistency_pass()
        finally:
            stop.set()
            ticker.join()
        self.write_progress(final=True)
        return 0

    def consistency_pass(self) -> None:
        from huggingface_hub import snapshot_download

        def state() -> dict:
            out = {}
            for f in self.files:
                ptr = self.pointer(f["path"])
                try:
                    st = os.stat(ptr)
                    out[f["path"]] = (os.readlink(ptr) if os.path.islink(ptr) else None, st.st_ino, st.st_size)
                except OSError:
                    out[f["path"]] = None
            return out

        before = state()
        snap = self.retrying("consistency pass", lambda: snapshot_download(
            self.args.repo, revision=self.args.commit, cache_dir=self.args.cache_dir,
            ignore_patterns=self.args.ignore or None, max_workers=self.args.workers))
        after = state()
        changed = sorted(p for p in before if before[p] != after[p])
        if changed:
            raise FetchError(f"snapshot_download had to re-fetch or re-link {len(changed)} file(s) "
                             f"({', '.join(changed[:3])}): the cache layout written by fetch-model is wrong")
        self.snapshot = Path(snap)


class _Counting:
    """File object wrapper counting what http_get writes (for rate_bps / eta_s)."""

    def __init__(self, f, fetcher: Fetcher):
        self._f, self._fetcher = f, fetcher

    def write(self, data) -> int:
        n = self._f.write(data)
        with self._fetcher.lock:
            self._fetcher.downloaded += len(data)
        return n

    def __getattr__(self, name):
        return getattr(self._f, name)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * 1024 * 1024):
            h.update(block)
    return h.hexdigest()


def _same_or_hub_host(url: str, location: str) -> bool:
    try:
        from huggingface_hub.file_download import _is_same_or_hub_host
        return _is_same_or_hub_host(url, location)
    except ImportError:
        from urllib.parse import urlsplit
        return urlsplit(url).netloc == urlsplit(location).netloc


def link_dir(snap: Path, files: list[Path], dest: Path) -> None:
    import shutil

    tmp = dest.with_name(dest.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    for p in files:
        rel = p.relative_to(snap)
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        os.link(os.path.realpath(p), tmp / rel)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


def main() -> int:
    ap = argparse.ArgumentParser(prog="fetch-model")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--ignore", action="append", default=[])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--link-dir")
    args = ap.parse_args()

    fetcher = Fetcher(args)
    try:
        fetcher.run()
    except KeyboardInterrupt:
        fetcher.write_progress(final=True, error="interrupted")
        fetcher.say(f"fetch-model: {fetcher.label}: interrupted", err=True)
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        msg = _one_line(exc)
        fetcher.write_progress(final=True, error=msg)
        fetcher.say(f"fetch-model: {fetcher.label}: {msg}", err=True)
        return 1

    snap = fetcher.snapshot
    files = [p for p in snap.rglob("*") if not p.is_dir()]
    size = sum(p.stat().st_size for p in files)
    line = (f"{args.repo}@{args.commit[:12]}: {len(files)} files, {size} bytes "
            f"in {time.monotonic() - fetcher.start:.1f}s")
    if fetcher.resumed:
        offsets = ", ".join(str(n) for n in sorted(fetcher.resumed)[:5]) + (", ..." if len(fetcher.resumed) > 5 else "")
        line += f", resumed {len(fetcher.resumed)} file(s) from byte offsets ({offsets})"
    print(line, flush=True)

    if args.link_dir:
        link_dir(snap, files, Path(args.link_dir))
        print(f"linked {len(files)} files at {args.link_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
