"""Pull a pinned image by digest through docker's Engine API and tag it as the reference the serving unit runs. Run
on a Spark as a host job (mirror/steps/images.py), as `python3 -c <this file's text> ARGS` with
PYTHONPATH=<data_dir>/bin (its hostlib.py: the progress file; its docker_images.py: the Engine API and THE rule of
what counts as the pinned image). Stdlib only.

    --pull REF@DIGEST    what to pull: from the mirror's registry (10.1.0.5:5000/nvcr.io/nvidia/x@sha256:<platform>)
                         or from the image's own registry (nvcr.io/nvidia/x@sha256:<index>)
    --have REF@DIGEST    the image's upstream reference by the lock's digest: where the host has it already, it is
                         only tagged (no byte moves, whether the mirror is up or down)
    --tag NAME:TAG       the local tag the unit runs (name:sha256-<hex> of the lock's digest)
    --digests D1,D2,...  the digests the lock records for the image (its index's and its platforms'): the tag counts
                         as there only when the image under it has one of them (docker_images.pinned); a tag on
                         another image is moved to the pinned one
    --bytes N            the compressed bytes the lock records for this platform (0: unknown)

Source: Docker Engine API (docs.docker.com/reference/api/engine): `POST /images/create?fromImage=&tag=` streams
JSON events with `progressDetail {current, total}` per layer and `error`/`errorDetail` on failure;
`POST /images/{name}/tag?repo=&tag=` answers 201 (and moves a tag that exists). Why the Engine API and not `docker
pull`: the CLI prints no byte counts without a terminal, and the controller shows bytes, total and ETA per host.
docker verifies every manifest and layer it pulls against its digest; the tag is made only after the pulled image
answers to REF@DIGEST, so a failed or mismatching pull tags nothing.

Progress (SPECFLEET_PROGRESS_FILE): {"kind": "pull", "ref", "bytes_done", "bytes_total", "rate_bps", "eta_s",
"layers_done", "layers_total"}.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse

from docker_images import api, inspect, pinned, quoted
from hostlib import Progress

PROGRESS_EVERY = 2.0


def has(ref: str) -> bool:
    return inspect(ref) is not None


def tag(source: str, target: str) -> None:
    repo, _, name_tag = target.rpartition(":")
    query = urllib.parse.urlencode({"repo": repo, "tag": name_tag})
    status, resp = api("POST", f"/images/{quoted(source)}/tag?{query}")
    body = resp.read().decode(errors="replace")
    if status != 201:
        raise SystemExit(f"image-pull: tagging {source} as {target} failed (HTTP {status}): {body.strip()[:300]}")


def pull(ref: str, expected: int) -> None:
    """POST /images/create for REF@DIGEST, following docker's JSON stream; its error is one line."""
    name, _, digest = ref.rpartition("@")
    query = urllib.parse.urlencode({"fromImage": name, "tag": digest})
    status, resp = api("POST", f"/images/create?{query}")
    if status != 200:
        raise SystemExit(f"image-pull: {ref}: docker answered HTTP {status}: "
                         f"{resp.read().decode(errors='replace').strip()[:300]}")
    progress, started, last = Progress(), time.monotonic(), 0.0  # type: ignore[no-untyped-call]
    layers: dict[str, tuple[int, int]] = {}  # layer id -> (bytes downloaded, its size)
    finished: set[str] = set()
    for raw in resp:
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if event.get("error"):
            raise SystemExit(f"image-pull: {ref}: {event['error'].strip()}")
        lid, detail = event.get("id"), event.get("progressDetail") or {}
        if lid and event.get("status") == "Downloading" and detail.get("total"):
            layers[lid] = (int(detail.get("current", 0)), int(detail["total"]))
        elif lid and event.get("status") in ("Download complete", "Already exists", "Pull complete"):
            finished.add(lid)
            if lid in layers:
                layers[lid] = (layers[lid][1], layers[lid][1])
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            last = now
            report(progress, ref, expected, layers, finished, now - started)
    report(progress, ref, expected, layers, finished, time.monotonic() - started)


def report(progress: Progress, ref: str, expected: int, layers: dict[str, tuple[int, int]], finished: set[str],
           elapsed: float) -> None:
    done = sum(c for c, _ in layers.values())
    total = expected or sum(t for _, t in layers.values())
    rate = done / elapsed if elapsed > 0 else 0
    progress(kind="pull", ref=ref, bytes_done=done, bytes_total=total, rate_bps=rate,
             eta_s=(total - done) / rate if rate > 0 and total else None, layers_done=len(finished),
             layers_total=len(set(layers) | finished))


def main(argv: list[str]) -> int:
    opts = dict(zip(argv[0::2], argv[1::2], strict=True))
    want, have, target = opts["--pull"], opts.get("--have"), opts["--tag"]
    digests = [d for d in opts.get("--digests", "").split(",") if d]
    found = inspect(target)
    if found is not None and pinned(found.get("RepoDigests"), digests):
        print(f"image-pull: {target} is here already", flush=True)
        return 0
    if found is not None:
        print(f"image-pull: {target} is on another image ({str(found.get('Id'))[:19]}, none of whose digests the "
              "lock records): moving it to the pinned one", flush=True)
    if have and has(have):
        tag(have, target)
        print(f"image-pull: {have} is here already: tagged {target} (nothing pulled)", flush=True)
        return 0
    pull(want, int(opts.get("--bytes") or 0))
    if not has(want):
        raise SystemExit(f"image-pull: {want}: the pull ended but docker has no image answering to it")
    tag(want, target)
    print(f"image-pull: pulled {want}, tagged {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
