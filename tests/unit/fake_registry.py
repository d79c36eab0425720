"""A tiny in-process container registry for the unit tests (plain HTTP on 127.0.0.1, which images.py talks to over
http as docker does): /v2 manifests by tag or digest and blobs by digest, behind an anonymous bearer token."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
TOKEN = "anon-pull-token"


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *a):
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _answer(self, head: bool):
        registry = self.server.registry
        registry.seen.append((self.command, self.path, self.headers.get("Accept", "")))
        if self.path.startswith("/token?"):
            self._send(200, json.dumps({"token": TOKEN}).encode())
            return
        kind = "/manifests/" if "/manifests/" in self.path else "/blobs/"
        name, _, reference = self.path.removeprefix("/v2/").partition(kind)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}" or name in registry.private:
            self._send(401, headers={"WWW-Authenticate": f'Bearer realm="http://{self.headers["Host"]}/token",'
                                                         f'service="fake-registry",scope="repository:{name}:pull"'})
            return
        digest = registry.tags.get(f"{name}:{reference}", reference)
        if reference.startswith("sha256:") and registry.failing:
            self._send(registry.failing, b"registry is having a bad day")
        elif digest in registry.contents:
            media_type, body = registry.contents[digest]
            self._send(200, body, {"Docker-Content-Digest": digest, "Content-Type": media_type}, head)
        elif digest != reference:  # a tag whose digest the registry has no body for: HEAD answers only
            self._send(200 if head else 404, headers={"Docker-Content-Digest": digest}, head=head)
        else:
            self._send(404)

    def do_HEAD(self):
        self._answer(True)

    def do_GET(self):
        self._answer(False)


class _Server(ThreadingHTTPServer):
    registry: FakeRegistry


class FakeRegistry:
    def __init__(self, tags: dict[str, str] | None = None):
        self.tags = dict(tags or {})  # "name:tag" -> digest
        self.contents: dict[str, tuple[str, bytes]] = {}  # digest -> (media type, body): manifests and blobs
        self.failing: int | None = None  # an HTTP status every manifest/blob GET by digest answers with
        # repositories an anonymous pull token may not read: 401 with the challenge again, also with the token (the
        # token flow of docs.docker.com/reference/api/registry/auth: a token whose access lacks `pull` on the repository
        # is refused as no token is; Docker Hub answers a private repository so)
        self.private: set[str] = set()
        self.seen: list[tuple[str, str, str]] = []  # (method, path, Accept)
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.registry = self
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def put(self, doc: dict, media_type: str) -> tuple[str, int]:
        """Store a JSON manifest or blob; its (digest, size)."""
        body = json.dumps(doc).encode()
        self.contents[digest_of(body)] = (media_type, body)
        return digest_of(body), len(body)

    def image(self, platform: dict, layers: list[int]) -> dict:
        """A platform's image manifest with its config blob stored (layer blobs are never fetched, so not stored);
        the index entry naming it."""
        config, config_size = self.put({**platform, "rootfs": {"type": "layers"}}, OCI_CONFIG)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": {"mediaType": OCI_CONFIG, "digest": config, "size": config_size},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                "digest": "sha256:" + f"{i:02x}" * 32, "size": size} for i, size in enumerate(layers)]}
        digest, size = self.put(manifest, OCI_MANIFEST)
        return {"mediaType": OCI_MANIFEST, "digest": digest, "size": size, "platform": platform,
                "config_size": config_size}

    def index(self, entries: list[dict]) -> str:
        """Store an OCI index of `entries` (from image()); its digest."""
        manifests = [{k: v for k, v in e.items() if k != "config_size"} for e in entries]
        return self.put({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}, OCI_INDEX)[0]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
