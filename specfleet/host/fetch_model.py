#!/usr/bin/env python3
"""fetch-model: download one model at a pinned commit into the host's Hugging Face cache.

Installed by specfleet as <data_dir>/bin/fetch-model and run with <data_dir>/venv/bin/python (which
has the pinned huggingface_hub). The token is never on the command line: huggingface_hub reads it from
the root-only file named by HF_TOKEN_PATH. Re-running completes an interrupted fetch; complete files
are not downloaded again. With --link-dir, the snapshot is also materialised as a directory of hard
links (real files, no extra space) at a stable path that a container can bind-mount read-only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(prog="fetch-model")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--ignore", action="append", default=[])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--link-dir")
    args = ap.parse_args()

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    start = time.monotonic()
    try:
        snap = Path(snapshot_download(args.repo, revision=args.commit, cache_dir=args.cache_dir,
                                      ignore_patterns=args.ignore or None, max_workers=args.workers))
    except HfHubHTTPError as exc:
        print(f"fetch-model: {args.repo}@{args.commit[:12]}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    except Exception as exc:  # network errors: one line, not a traceback
        print(f"fetch-model: {args.repo}@{args.commit[:12]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    # A killed fetch leaves <blob>.<id>.incomplete files that huggingface_hub never reuses: once the
    # snapshot is complete they are only wasted disk (possibly tens of GB), so remove them.
    for orphan in (snap.parent.parent / "blobs").glob("*.incomplete"):
        orphan.unlink(missing_ok=True)
        print(f"removed interrupted download {orphan.name}")
    files = [p for p in snap.rglob("*") if not p.is_dir()]
    size = sum(p.stat().st_size for p in files)
    print(f"{args.repo}@{args.commit[:12]}: {len(files)} files, {size} bytes in {time.monotonic() - start:.1f}s")

    if args.link_dir:
        dest = Path(args.link_dir)
        tmp = dest.with_name(dest.name + ".tmp")
        if tmp.exists():
            import shutil
            shutil.rmtree(tmp)
        for p in files:
            rel = p.relative_to(snap)
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            os.link(os.path.realpath(p), tmp / rel)
        if dest.exists():
            import shutil
            shutil.rmtree(dest)
        os.replace(tmp, dest)
        print(f"linked {len(files)} files at {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
