"""Resolve a container image reference to the digest its registry serves for it (registry HTTP API v2).

    HEAD /v2/<name>/manifests/<tag>   Accept: OCI index / Docker manifest list / single manifests
    -> 200 with Docker-Content-Digest (or GET and hash the body when a registry leaves the header out)
    -> 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`: fetch an anonymous pull token
       from the realm, then ask again with `Authorization: Bearer <token>`

The digest of a multi-arch image is the index's digest (what `docker pull IMAGE@DIGEST` and RepoDigests
use), so one pin serves aarch64 Sparks and x86 hosts alike. Only anonymous pulls are supported (public
images such as nvcr.io/nvidia/tensorrt-llm/release); a registry that wants credentials answers "not
pinned". Runs on the controller, stdlib only (urllib)."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
))
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as docker names it (docker.io for Docker Hub)
    name: str  # repository path in that registry (library/x for official Docker Hub images)
    tag: str | None
    digest: str | None

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def scheme(self) -> str:
        """https, except for loopback registries, which docker itself also talks to over plain http."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry
        return "http" if host in ("localhost", "127.0.0.1", "[::1]") else "https"


def parse_reference(ref: str) -> ImageRef:
    """docker's reference normalisation: a first component with '.' or ':' (or `localhost`) is a registry."""
    rest, _, digest = ref.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    name, tag = path, None
    if ":" in path.rsplit("/", 1)[-1]:
        name, tag = path.rsplit(":", 1)
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"
    if tag is None and not digest:
        tag = "latest"
    return ImageRef(registry, name, tag, digest or None)


class NotPinned(Exception):
    """The image has no digest we can learn: the message says why (one line)."""


def _challenge(header: str) -> dict[str, str]:
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        raise NotPinned(f"registry wants {scheme or 'unknown'} authentication (only anonymous pulls are supported)")
    return dict(re.findall(r'(\w+)="([^"]*)"', params))


def _open(req: urllib.request.Request, timeout: float):
    return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https only: built from a parsed reference)


def resolve_digest(ref: str, timeout: float = 15.0) -> str:
    """The registry's digest for `ref` (sha256:...); raises NotPinned with the reason."""
    image = parse_reference(ref)
    if image.digest:
        return image.digest
    url = f"{image.scheme}://{image.api_host}/v2/{image.name}/manifests/{image.tag}"
    headers = {"Accept": MANIFEST_TYPES, "User-Agent": "specfleet-lock"}

    def ask(method: str):
        return _open(urllib.request.Request(url, method=method, headers=headers), timeout)

    try:
        try:
            resp = ask("HEAD")
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or not exc.headers.get("WWW-Authenticate"):
                raise
            challenge = _challenge(exc.headers["WWW-Authenticate"])
            if not challenge.get("realm", "").startswith(("https://", "http://")):
                raise NotPinned("registry sent an authentication challenge without a usable realm") from None
            query = {k: v for k, v in (("service", challenge.get("service")),
                                        ("scope", challenge.get("scope") or f"repository:{image.name}:pull")) if v}
            sep = "&" if "?" in challenge["realm"] else "?"
            token_url = challenge["realm"] + sep + urllib.parse.urlencode(query)
            with _open(urllib.request.Request(token_url, headers={"User-Agent": "specfleet-lock"}), timeout) as tresp:
                body = json.loads(tresp.read() or b"{}")
            token = body.get("token") or body.get("access_token")
            if not token:
                raise NotPinned("registry gave no anonymous pull token") from None
            headers["Authorization"] = f"Bearer {token}"
            resp = ask("HEAD")
        with resp:
            digest = resp.headers.get("Docker-Content-Digest", "")
        if not _DIGEST.fullmatch(digest):
            with ask("GET") as resp:
                digest = (resp.headers.get("Docker-Content-Digest", "")
                          or "sha256:" + hashlib.sha256(resp.read()).hexdigest())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404):
            raise NotPinned(f"{image.registry} has no {image.name}:{image.tag} anonymous pulls can see "
                            f"(HTTP {exc.code})") from None
        raise NotPinned(f"{image.registry} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise NotPinned(f"cannot reach {image.registry}: {reason}") from None
    if not _DIGEST.fullmatch(digest):
        raise NotPinned(f"{image.registry} sent a digest that is not sha256:<64 hex>: {digest[:80]!r}")
    return digest
