"""Resolve a container image reference to the digest its registry serves for it (registry HTTP API v2).

    HEAD /v2/<name>/manifests/<tag>   Accept: OCI index / Docker manifest list / single manifests
    -> 200 with Docker-Content-Digest (or GET and hash the body when a registry leaves the header out)
    -> 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`: fetch an anonymous pull token
       from the realm, then ask again with `Authorization: Bearer <token>`

`Registry` is that token dance for any request to an image's repository (image_sizes.py reads manifests with it).
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
USER_AGENT = "specfleet-lock"
DIGEST_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")


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


def failure(image: ImageRef, what: str, exc: Exception) -> str:
    """One line for a registry request that failed: an HTTP status, or an unreachable registry."""
    if isinstance(exc, urllib.error.HTTPError):
        if exc.code in (401, 403, 404):
            return f"{image.registry} has no {what} anonymous pulls can see (HTTP {exc.code})"
        return f"{image.registry} answered HTTP {exc.code}"
    return f"cannot reach {image.registry}: {getattr(exc, 'reason', exc)}"


class Registry:
    """Requests to one image's repository in its registry, anonymously: a 401 with a bearer challenge fetches a
    pull token from the challenge's realm and asks once more; the token is kept for the next requests (and fetched
    again when the registry challenges again, e.g. after it expired)."""

    def __init__(self, image: ImageRef, timeout: float = 15.0):
        self.image, self.timeout = image, timeout
        self.token: str | None = None

    def url(self, kind: str, reference: str) -> str:
        """`kind`: manifests or blobs; `reference`: a tag or a digest."""
        return f"{self.image.scheme}://{self.image.api_host}/v2/{self.image.name}/{kind}/{reference}"

    def open(self, url: str, method: str = "GET", accept: str = MANIFEST_TYPES):
        """The response (a context manager); urllib's errors as they come, NotPinned for an unusable challenge."""
        try:
            return self._send(url, method, accept)
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or not exc.headers.get("WWW-Authenticate"):
                raise
            self.token = self._pull_token(_challenge(exc.headers["WWW-Authenticate"]))
        return self._send(url, method, accept)

    def _send(self, url: str, method: str, accept: str):
        req = urllib.request.Request(url, method=method, headers={"Accept": accept, "User-Agent": USER_AGENT})
        if self.token:  # not sent on where a blob request is redirected to (a CDN with its own signed URL)
            req.add_unredirected_header("Authorization", f"Bearer {self.token}")
        return _open(req, self.timeout)

    def _pull_token(self, challenge: dict[str, str]) -> str:
        if not challenge.get("realm", "").startswith(("https://", "http://")):
            raise NotPinned("registry sent an authentication challenge without a usable realm")
        query = {k: v for k, v in (("service", challenge.get("service")),
                                    ("scope", challenge.get("scope") or f"repository:{self.image.name}:pull")) if v}
        sep = "&" if "?" in challenge["realm"] else "?"
        token_url = challenge["realm"] + sep + urllib.parse.urlencode(query)
        with _open(urllib.request.Request(token_url, headers={"User-Agent": USER_AGENT}), self.timeout) as tresp:
            body = json.loads(tresp.read() or b"{}")
        token = body.get("token") or body.get("access_token")
        if not token:
            raise NotPinned("registry gave no anonymous pull token")
        return str(token)


def _open(req: urllib.request.Request, timeout: float):
    return urllib.request.urlopen(req, timeout=timeout)  # noqa: S310 (http/https only: built from a parsed reference)


def resolve_digest(ref: str, timeout: float = 15.0) -> str:
    """The registry's digest for `ref` (sha256:...); raises NotPinned with the reason."""
    image = parse_reference(ref)
    if image.digest:
        return image.digest
    registry = Registry(image, timeout)
    url = registry.url("manifests", str(image.tag))
    try:
        with registry.open(url, "HEAD") as resp:
            digest = resp.headers.get("Docker-Content-Digest", "")
        if not DIGEST_PATTERN.fullmatch(digest):
            with registry.open(url, "GET") as resp:
                digest = (resp.headers.get("Docker-Content-Digest", "")
                          or "sha256:" + hashlib.sha256(resp.read()).hexdigest())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NotPinned(failure(image, f"{image.name}:{image.tag}", exc)) from None
    if not DIGEST_PATTERN.fullmatch(digest):
        raise NotPinned(f"{image.registry} sent a digest that is not sha256:<64 hex>: {digest[:80]!r}")
    return digest
