"""STAND-IN for the image endpoints of docker's Engine API, on a unix socket: what a Spark's image programs ask of
dockerd (mirror/host/image_pull.py, host/docker_images.py). Its behaviour comes from upstream, never from specfleet:

- Docker Engine API (docs.docker.com/reference/api/engine, v1.41+): `GET /images/{name}/json` (ImageInspect: `Id`,
  `RepoTags`, `RepoDigests`; 404 for no such image), `GET /images/json` (ImageList), `GET /containers/json?all=true`
  (ContainerList: `ImageID`, `State`), `POST /images/create?fromImage=&tag=` (a JSON event stream; an `error` event
  on failure), `POST /images/{name}/tag?repo=&tag=` (201; a tag that exists moves to this image), `DELETE
  /images/{name}` (200 with `Untagged`/`Deleted` items, 404, 409 conflict).
- moby/moby daemon/images/image_delete.go (ImageDelete, isSingleReference, imageDeleteHelper; commit 02563f28): a
  repository reference is removed first; the last reference of an image a container uses is refused without force
  ("unable to remove repository reference ... (must force)"); removing a tag also removes the digest references of
  the same repository when no tag of it is left; once no reference is left the image is deleted, unless a container
  uses it (then it stays, quietly). A delete by id is refused without force when the references span repositories.
- A name resolves as moby's reference store does: an id or its prefix, `name@sha256:...` (a digest reference) or
  `name[:tag]` (tag `latest` when none).

`registry`: what a pull of a reference finds (reference -> the id of the image it brings); `stream`: the pull's events.
"""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
import urllib.parse
from dataclasses import dataclass, field


@dataclass
class Image:
    id: str
    tags: list[str] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    size: int = 1000

    def summary(self) -> dict:
        return {"Id": self.id, "RepoTags": list(self.tags), "RepoDigests": list(self.digests), "Size": self.size}


def repository(ref: str) -> str:
    """The repository of a tag or digest reference (`host:5000/a/b:t` -> `host:5000/a/b`)."""
    name = ref.partition("@")[0]
    last = name.rsplit("/", 1)[-1]
    return name[: len(name) - len(last)] + last.partition(":")[0]


def normalized(ref: str) -> str:
    return ref if "@" in ref or ":" in ref.rsplit("/", 1)[-1] else f"{ref}:latest"


class DockerStandin(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, images: list[Image] = (), registry: dict[str, str] | None = None,
                 stream: list[dict] = (), containers: list[dict] = ()):
        self.images = {i.id: i for i in images}
        self.registry, self.stream, self.containers = dict(registry or {}), list(stream), list(containers)
        self.calls: list[tuple] = []
        self.lock = threading.Lock()
        super().__init__(path, _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    # ---- the reference store --------------------------------------------------------------------------------------
    def by_id(self, name: str) -> Image | None:
        """An id, or a prefix of at least 12 hex digits of one."""
        hex_part = name.removeprefix("sha256:")
        return next((i for i in self.images.values() if len(hex_part) >= 12
                     and i.id.removeprefix("sha256:").startswith(hex_part)), None)

    def resolve(self, name: str) -> Image | None:
        ref = normalized(name)
        return self.by_id(name) or next((i for i in self.images.values() if ref in i.tags or ref in i.digests), None)

    def used(self, image: Image) -> bool:
        return any(c["ImageID"] == image.id for c in self.containers)

    def pull(self, ref: str) -> bool:
        if any("error" in e for e in self.stream) or ref not in self.registry:
            return False
        image = self.images.setdefault(self.registry[ref], Image(self.registry[ref]))
        if ref not in image.digests:
            image.digests.append(ref)
        return True

    def tag(self, source: str, target: str) -> bool:
        image = self.resolve(source)
        if image is None:
            return False
        for other in self.images.values():
            if target in other.tags:
                other.tags.remove(target)
        image.tags.append(target)
        return True

    def delete(self, name: str) -> tuple[int, object]:
        """ImageDelete without force (moby's image_delete.go)."""
        image = self.resolve(name)
        if image is None:
            return 404, {"message": f"No such image: {name}"}
        refs = image.tags + image.digests
        if self.by_id(name) is image:
            if len({repository(r) for r in refs}) > 1 or len(image.tags) > 1:
                return 409, {"message": f"conflict: unable to delete {image.id[7:19]} (must be forced) - image is "
                                        "referenced in multiple repositories"}
            if self.used(image):
                return 409, {"message": f"conflict: unable to delete {image.id[7:19]} (must be forced) - image is "
                                        "being used by stopped container"}
            del self.images[image.id]
            return 200, [{"Untagged": r} for r in refs] + [{"Deleted": image.id}]
        ref = normalized(name)
        if _single_reference(refs) and self.used(image):
            return 409, {"message": f"conflict: unable to remove repository reference \"{name}\" (must force) - "
                                    f"container is using its referenced image {image.id[7:19]}"}
        out: list[dict] = [{"Untagged": ref}]
        (image.tags if ref in image.tags else image.digests).remove(ref)
        if "@" not in ref and not any(repository(t) == repository(ref) for t in image.tags):
            for d in [d for d in image.digests if repository(d) == repository(ref)]:
                image.digests.remove(d)
                out.append({"Untagged": d})
        if not image.tags and not image.digests and not self.used(image):
            del self.images[image.id]
            out.append({"Deleted": image.id})
        return 200, out


def _single_reference(refs: list[str]) -> bool:
    """moby's isSingleReference: every reference in one repository, and at most one tag."""
    tags = [r for r in refs if "@" not in r]
    return len(refs) == 1 or (len(tags) <= 1 and len({repository(r) for r in refs}) == 1)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: DockerStandin

    def address_string(self):
        return "docker.sock"

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: object = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _name(self, url) -> str:
        return urllib.parse.unquote(url.path.split("/")[2])

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        with self.server.lock:
            if url.path == "/images/json":
                self.server.calls.append(("LIST",))
                return self._reply(200, [i.summary() for i in self.server.images.values()])
            if url.path == "/containers/json":
                return self._reply(200, self.server.containers)
            name = self._name(url)
            self.server.calls.append(("GET", name))
            image = self.server.resolve(name)
        self._reply(200, image.summary()) if image else self._reply(404, {"message": f"No such image: {name}"})

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        with self.server.lock:
            if url.path == "/images/create":
                ref = f"{query['fromImage']}@{query['tag']}"
                self.server.calls.append(("PULL", ref))
                self.server.pull(ref)
                body = b"".join(json.dumps(e).encode() + b"\r\n" for e in self.server.stream)
                return self._reply(200, raw=body)
            source, target = self._name(url), f"{query['repo']}:{query['tag']}"
            self.server.calls.append(("TAG", source, target))
            ok = self.server.tag(source, target)
        self._reply(201, raw=b"") if ok else self._reply(404, {"message": f"No such image: {source}"})

    def do_DELETE(self):
        name = self._name(urllib.parse.urlsplit(self.path))
        with self.server.lock:
            self.server.calls.append(("DELETE", name))
            status, body = self.server.delete(name)
        self._reply(status, body)
