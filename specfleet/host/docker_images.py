"""A Spark's docker images as specfleet sees them: THE rule of whether an image is the one the lock pins, the local
tag specfleet makes for it, and the removal of the images no kept release uses. Docker's Engine API on its unix
socket, stdlib only, and no import of its siblings, so that it runs in three ways with the same code:
- installed next to the host tool (<data_dir>/bin/docker_images.py): the host tool's prune imports it, and so does
  the image pull (mirror/host/image_pull.py, run with PYTHONPATH=<data_dir>/bin);
- imported by the controller (`specfleet.host.docker_images`): the one status read prints what docker says of the
  unit's image (its RepoDigests) and the controller applies `pinned` to it (serving/status.py).

THE rule (`pinned`): a local image is the pinned image only when one of its RepoDigests has a digest the lock records
for it (the index's, or a platform manifest's: a pull from the fleet's registry is by the platform's digest). A tag
proves nothing: `docker tag` can point `name:sha256-<hex>` at any image. A RepoDigest is docker's record of a
manifest it pulled and verified; no `docker tag` makes one.

Sources (Docker Engine API, docs.docker.com/reference/api/engine, v1.41 and later): `GET /images/{name}/json`
(ImageInspect: `Id`, `RepoTags`, `RepoDigests`: "content-addressable digests of locally available image manifests
that the image is referenced from"); `GET /images/json` (ImageList: `Id`, `RepoTags`, `RepoDigests`, `Size`);
`GET /containers/json?all=true` (ContainerList, stopped containers too: `ImageID`); `DELETE /images/{name}`
(ImageDelete, 200 with `Untagged`/`Deleted` items, 404 no such image, 409 conflict). Removal is reference by
reference, never forced: moby's daemon/images/image_delete.go (v27.x) deletes an image once its last reference
goes, and refuses, without `force`, to remove the last reference of an image a container (running or stopped)
uses; a delete by id is refused without `force` when the references span several repositories, as those of an
image pulled from the fleet's registry and tagged under its upstream name do.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

SOCKET = "/var/run/docker.sock"
# THE form of the local tag a pinned image runs as (plan.local_image makes it): <name>:sha256-<hex of the lock's digest>
LOCAL_TAG = re.compile(r"^.+:sha256-[0-9a-f]{64}$")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 3600):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def api(method: str, path: str) -> tuple[int, http.client.HTTPResponse]:
    """One Engine API request on docker's socket ($SPECFLEET_DOCKER_SOCKET, else /var/run/docker.sock)."""
    conn = UnixHTTPConnection(os.environ.get("SPECFLEET_DOCKER_SOCKET", SOCKET))
    conn.request(method, path, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, resp


def _json(method: str, path: str) -> tuple[int, Any]:
    status, resp = api(method, path)
    body = resp.read().decode(errors="replace")
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, body


def quoted(ref: str) -> str:
    return urllib.parse.quote(ref, safe="")


def inspect(ref: str) -> dict[str, Any] | None:
    """What docker has under `ref` (a tag, name@digest or id); None: nothing."""
    status, body = _json("GET", f"/images/{quoted(ref)}/json")
    return body if status == 200 and isinstance(body, dict) else None


def pinned(repo_digests: Iterable[str] | None, digests: Iterable[str]) -> bool:
    """THE rule: an image is the pinned one when one of its RepoDigests (`name@sha256:...`) has one of `digests`."""
    wanted = set(digests)
    return any(str(ref).rpartition("@")[2] in wanted for ref in repo_digests or ())


def is_local_tag(ref: str) -> bool:
    return bool(LOCAL_TAG.match(ref))


def removable(images: list[dict[str, Any]], used_ids: set[str], kept_refs: set[str]) -> list[dict[str, Any]]:
    """The images to remove: tagged by specfleet only (every tag of the local-tag form), used by no container
    (`used_ids`) and under no reference a kept release names (`kept_refs`: tags or ids). An image that also carries
    another tag is someone else's too: left alone."""
    out = []
    for image in images:
        tags = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
        if not tags or not all(is_local_tag(t) for t in tags):
            continue
        if image.get("Id") in used_ids or image.get("Id") in kept_refs or set(tags) & kept_refs:
            continue
        out.append(image)
    return out


def remove_unused(kept_refs: set[str], say: Callable[[str], None]) -> list[str]:
    """Remove the images `removable` names, reference by reference (never forced: docker itself refuses the last
    reference of an image a container uses); say each one removed, and each one docker kept. Returns their tags."""
    status, images = _json("GET", "/images/json")
    cstatus, containers = _json("GET", "/containers/json?all=true")
    if status != 200 or cstatus != 200 or not isinstance(images, list) or not isinstance(containers, list):
        raise OSError(f"docker's image or container list: HTTP {status}/{cstatus}")
    used = {str(c.get("ImageID")) for c in containers}
    kept_ids = {i["Id"] for i in images if set(i.get("RepoTags") or []) & kept_refs}
    removed = []
    for image in removable(images, used, kept_refs | kept_ids):
        tags = sorted(image.get("RepoTags") or [])
        refused = _remove(tags + sorted(image.get("RepoDigests") or []))
        size = f"{int(image.get('Size') or 0) / 1e9:.2f} GB"
        if refused:
            say(f"kept image {', '.join(tags)} ({size}): docker refused to remove it ({refused})")
            continue
        say(f"removed image {', '.join(tags)} ({image['Id'][:19]}, {size}): no kept release runs it")
        removed += tags
    return removed


def _remove(refs: list[str]) -> str:
    """Delete each reference in turn (a reference already gone with an earlier one is no error); the first refusal."""
    for ref in refs:
        status, body = _json("DELETE", f"/images/{quoted(ref)}")
        if status not in (200, 404):
            message = body.get("message") if isinstance(body, dict) else body
            return f"HTTP {status}: {str(message).strip()[:200]}"
    return ""
