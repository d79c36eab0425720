"""Fetch pinned image manifests, by digest, from their upstream registries into the mirror's image store: each one
once, before any Spark pulls it. Run on the mirror host as a host job (mirror/steps/images.py), as
`python3 -c <this file's text> ARGS` with PYTHONPATH=<data_dir>/bin (its hostlib.py: the progress file). Stdlib only.

    --writer-config PATH   the registry config of the store's one writer (writer.yml; loopback, read-write)
    --user NAME            the registry's system user (the store's owner): the writer runs as it
    --authfile PATH        optional: a containers-auth.json for the upstream registry (the NGC login); skopeo reads it
                           (--src-authfile), so the key is never on a command line
    --budget-bytes N       optional: the store's budget (image_store_budget_gb); --keep D1,D2,...: the digests the
                           lock pins, which are never evicted
    --stall-sec S          optional: how long a copy may go without the store growing (default STALL_SEC)
    SRC DEST BYTES ...     per manifest: the upstream reference by digest (nvcr.io/nvidia/x@sha256:...), the
                           repository in the store (nvcr.io/nvidia/x) and its compressed bytes (0: unknown)

Why a writer of its own: the fleet's registry is read-only (its write routes do not exist), and distribution has
one listener per instance and no per-method access control without a token server. So the job starts a second
`docker-registry serve` on the same store, on a free loopback port, for its own lifetime only, and stops it on
every exit (SIGTERM included). skopeo copies each manifest into it with --preserve-digests, tagged
`sha256-<hex>` (a tagged manifest is not garbage to `docker-registry garbage-collect`); blobs already in the store
are skipped ("already present"), so a fetch killed halfway resumes with the blobs it had not finished. A copy that
fails is tried once more, with a fresh login (skopeo does not log in again when a registry ends its token early).
Afterwards the writer must answer the manifest by its digest, or the job fails. Before it copies, the disk under the
store must have room for what it fetches; a copy during which the store stops growing for STALL_SEC is stopped.

Progress (SPECFLEET_PROGRESS_FILE): {"kind": "image-fetch", "ref", "bytes_done", "bytes_total", "rate_bps",
"eta_s", "done", "total"}: bytes are the store's growth (blob files and uploads in flight), from BYTES.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from hostlib import Progress

REGISTRY = "/usr/bin/docker-registry"
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
))
PROGRESS_EVERY = 2.0
STALL_SEC = 300.0  # a copy whose store has not grown for this long is stopped (a full disk can hang an upload)


def say(line: str) -> None:
    print(f"image-fetch: {line}", flush=True)


def parse(argv: list[str]) -> tuple[dict[str, str], list[tuple[str, str, int]]]:
    opts: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0].startswith("--"):
        opts[rest[0][2:]] = rest[1]
        rest = rest[2:]
    if len(rest) % 3 or not {"writer-config", "user"} <= set(opts):
        raise SystemExit("image-fetch: usage: --writer-config PATH --user NAME [--authfile PATH] [--budget-bytes N "
                         "--keep D,...] [--stall-sec S] SRC DEST BYTES ...")
    return opts, [(rest[i], rest[i + 1], int(rest[i + 2])) for i in range(0, len(rest), 3)]


def store_of(config: str) -> str:
    """The writer config's storage root (the line `rootdirectory: "<path>"` specfleet renders)."""
    with open(config, encoding="utf-8") as f:
        for line in f:
            key, _, value = line.strip().partition(": ")
            if key == "rootdirectory":
                return str(json.loads(value))
    raise SystemExit(f"image-fetch: {config} names no storage rootdirectory")


def store_bytes(root: str) -> int:
    """Bytes of the blobs in the store and of the uploads in flight (distribution's filesystem layout)."""
    total = 0
    for base, _dirs, files in os.walk(os.path.join(root, "docker", "registry", "v2")):
        for name in files:
            if name == "data":
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(base, name)).st_size
    return total


def free_bytes(root: str) -> int:
    st = os.statvfs(root)
    return st.f_bavail * st.f_frsize


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def head_digest(url: str) -> str | None:
    """The Docker-Content-Digest the writer answers for a manifest URL (None: not there)."""
    req = urllib.request.Request(url, method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            digest = resp.headers.get("Docker-Content-Digest")
            return str(digest) if digest else None
    except (urllib.error.URLError, OSError):
        return None


class Writer:
    """The store's one writer: `docker-registry serve writer.yml` as the registry's user, on a free loopback port."""

    def __init__(self, config: str, user: str):
        self.port = free_port()
        env = {**os.environ, "REGISTRY_HTTP_ADDR": f"127.0.0.1:{self.port}"}
        self.proc = subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                                      REGISTRY, "serve", config], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(120):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise SystemExit(f"image-fetch: the store's writer exited: {err[-400:]}")
            try:
                urllib.request.urlopen(f"{self.url}/v2/", timeout=5).close()
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.25)
        raise SystemExit("image-fetch: the store's writer did not answer in 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class Failed(Exception):
    """A copy that failed: its one line."""


def copy(writer: Writer, src: str, dest: str, authfile: str | None, root: str,
         report: Callable[[int, float], None], stall_sec: float = STALL_SEC) -> None:
    """One manifest into the store with skopeo, reporting the store's growth while it runs."""
    digest = src.rpartition("@")[2]
    target = f"{writer.url.removeprefix('http://')}/{dest}:{digest.replace(':', '-')}"
    auth = ["--src-authfile", authfile] if authfile else ["--src-no-creds"]
    argv = ["skopeo", "copy", "--retry-times", "3", "--preserve-digests", *auth, "--dest-tls-verify=false",
            f"docker://{src}", f"docker://{target}"]
    start_bytes, started = store_bytes(root), time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    grown, moved = 0, time.monotonic()
    try:
        while proc.poll() is None:
            now_grown = store_bytes(root) - start_bytes
            if now_grown != grown:
                grown, moved = now_grown, time.monotonic()
            elif time.monotonic() - moved > stall_sec:
                raise SystemExit(f"image-fetch: {src}: the store {root} has not grown for {stall_sec:.0f} s "
                                 f"({free_bytes(root) / 1e9:.2f} GB free); stopped")
            report(grown, time.monotonic() - started)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=PROGRESS_EVERY)
    finally:  # SIGTERM to the job: skopeo stops with it (the blobs it completed stay in the store)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
    out = (proc.stdout.read() if proc.stdout else "").strip().splitlines()
    if proc.returncode != 0:
        last = out[-1] if out else "no output"
        hint = ("; nvcr.io's anonymous tokens expire and a refresh may refuse anonymous clients: set "
                "ngc_api_key_file" if not authfile and "unauthorized" in last.lower() else "")
        raise Failed(f"image-fetch: {src}: skopeo copy failed (exit {proc.returncode}): {last}{hint}")
    got = head_digest(f"{writer.url}/v2/{dest}/manifests/{digest}")
    if got != digest:
        raise SystemExit(f"image-fetch: {src}: the store answers {got or 'nothing'} for it, not {digest}")


def stored(root: str) -> list[tuple[str, str]]:
    """(repository, digest) of every tagged manifest in the store (distribution's filesystem layout)."""
    base = os.path.join(root, "docker", "registry", "v2", "repositories")
    out = []
    for path, _dirs, files in os.walk(base):
        if os.path.basename(path) == "current" and "link" in files and "/_manifests/tags/" in path:
            with open(os.path.join(path, "link"), encoding="utf-8") as f:
                out.append((os.path.relpath(path, base).split("/_manifests/tags/")[0], f.read().strip()))
    return sorted(out)


def make_room(writer: Writer, root: str, need: int, budget: int, keep: set[str], config: str, user: str) -> Writer:
    """Within the budget before anything is fetched: the manifests the lock no longer pins are deleted (the writer
    has delete enabled) and `docker-registry garbage-collect` removes the blobs no manifest references (safe beside
    the fleet's registry: it is read-only). Still over: one line, and nothing is fetched. Returns the writer (a new
    one after a collection)."""
    have = store_bytes(root)
    if have + need <= budget:
        return writer
    evict = [(repo, digest) for repo, digest in stored(root) if digest not in keep]
    for repo, digest in evict:
        req = urllib.request.Request(f"{writer.url}/v2/{repo}/manifests/{digest}", method="DELETE")
        with contextlib.suppress(urllib.error.HTTPError), urllib.request.urlopen(req, timeout=60):
            pass
        say(f"evicting {repo}@{digest} (the lock pins it no more)")
    if evict:
        writer.stop()
        subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", REGISTRY,
                        "garbage-collect", config], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False, timeout=3600)
        writer = Writer(config, user)
        have = store_bytes(root)
    if have + need > budget:
        writer.stop()
        raise SystemExit(f"image-fetch: image store {root}: {(have + need) / 1e9:.2f} GB needed for the images the "
                         f"fleet serves ({have / 1e9:.2f} GB kept, {need / 1e9:.2f} GB to fetch), over "
                         f"image_store_budget_gb {budget / 1e9:g}; nothing fetched")
    return writer


def main(argv: list[str]) -> int:
    opts, items = parse(argv)
    root = store_of(opts["writer-config"])
    progress = Progress()  # type: ignore[no-untyped-call]  # hostlib is typed loosely (installed text kept)
    writer = Writer(opts["writer-config"], opts["user"])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops the writer
    try:
        todo = [(s, d, n) for s, d, n in items
                if head_digest(f"{writer.url}/v2/{d}/manifests/{s.rpartition('@')[2]}") != s.rpartition("@")[2]]
        for src, _, _ in items:
            if all(src != s for s, _, _ in todo):
                say(f"{src}: in the store already")
        total = sum(n for _, _, n in todo)
        stall = float(opts.get("stall-sec", STALL_SEC))
        if "budget-bytes" in opts and todo:
            keep = {d for d in opts.get("keep", "").split(",") if d} | {s.rpartition("@")[2] for s, _, _ in items}
            writer = make_room(writer, root, total, int(opts["budget-bytes"]), keep, opts["writer-config"],
                               opts["user"])
        if total > free_bytes(root):  # the disk under the store, whatever the budget says
            raise SystemExit(f"image-fetch: image store {root}: {total / 1e9:.2f} GB to fetch, "
                             f"{free_bytes(root) / 1e9:.2f} GB free on its disk; nothing fetched")
        done_before = 0
        for i, (src, dest, size) in enumerate(todo, 1):
            say(f"{src}: fetching ({size / 1e9:.2f} GB)" if size else f"{src}: fetching (size unknown)")

            def report(grown: int, elapsed: float, src: str = src, i: int = i, done_before: int = done_before) -> None:
                done = done_before + grown
                rate = grown / elapsed if elapsed > 0 else 0
                eta = (total - done) / rate if rate > 0 and total else None
                progress(kind="image-fetch", ref=src, bytes_done=done, bytes_total=total, rate_bps=rate,
                         eta_s=eta, done=i - 1, total=len(todo))

            try:
                copy(writer, src, dest, opts.get("authfile"), root, report, stall)
            except Failed as exc:  # once more: a fresh login, and the blobs it finished are in the store
                say(f"{src}: {str(exc).removeprefix('image-fetch: ')}; once more (finished blobs are kept)")
                try:
                    copy(writer, src, dest, opts.get("authfile"), root, report, stall)
                except Failed as again:
                    raise SystemExit(str(again)) from None
            done_before += size
            say(f"{src}: in the store")
        progress(kind="image-fetch", ref="", bytes_done=total, bytes_total=total, rate_bps=0, eta_s=0,
                 done=len(todo), total=len(todo))
    finally:
        writer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
