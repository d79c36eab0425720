"""What a pinned image weighs per platform, from its registry's manifests alone (registry HTTP API v2, no layer is
downloaded):

    GET /v2/<name>/manifests/<pinned digest>
    -> an index (OCI image index / Docker manifest list): per entry with a platform, GET its manifest by digest
    -> a single manifest: GET its config blob (small JSON) for `os`/`architecture`/`variant`

A platform's compressed size is its manifest's config size plus the sizes of its layers: what a pull of that
platform transfers. Entries whose platform is `unknown/unknown` (the attestation manifests BuildKit adds) are no
platform and are skipped. Every body fetched by digest is checked against that digest. Anonymous pulls only, with
the token dance of images.Registry. Runs on the controller, stdlib only (urllib)."""

from __future__ import annotations

import hashlib
import json
import urllib.error

from .images import NotPinned, Registry, failure, parse_reference

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
IMAGE_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
CONFIG_TYPES = "application/vnd.oci.image.config.v1+json, application/vnd.docker.container.image.v1+json, */*"
ATTESTATION = "attestation-manifest"  # BuildKit's annotation vnd.docker.reference.type on an attestation entry


class NoSizes(Exception):
    """The registry did not tell the sizes: the message says why (one line)."""


def platform_key(platform: dict) -> str | None:
    """`os/architecture[/variant]`, or None for what is no platform (missing, or unknown/unknown)."""
    os_, arch = platform.get("os"), platform.get("architecture")
    if not os_ or not arch or (os_, arch) == ("unknown", "unknown"):
        return None
    return "/".join(str(part) for part in (os_, arch, platform.get("variant")) if part)


def compressed_bytes(manifest: dict) -> int:
    """What pulling the platform of `manifest` transfers: its config blob and its layers, compressed."""
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def platform_sizes(ref: str, digest: str, timeout: float = 15.0) -> dict[str, dict]:
    """{platform: {"digest": manifest digest, "bytes": compressed size}} of the image `ref` pinned at `digest`,
    sorted by platform; raises NoSizes with the reason."""
    image = parse_reference(ref)
    registry = Registry(image, timeout)
    try:
        top = _json(registry, "manifests", digest, ", ".join(INDEX_TYPES + IMAGE_TYPES))
        sizes: dict[str, dict] = {}
        if top.get("mediaType") in INDEX_TYPES or "manifests" in top:
            for entry in top["manifests"]:
                key = platform_key(entry.get("platform") or {})
                annotations = entry.get("annotations") or {}
                if key is None or annotations.get("vnd.docker.reference.type") == ATTESTATION:
                    continue
                accept = entry.get("mediaType") or ", ".join(IMAGE_TYPES)
                manifest = _json(registry, "manifests", entry["digest"], accept)
                sizes[key] = {"digest": entry["digest"], "bytes": compressed_bytes(manifest)}
        else:
            key = platform_key(_json(registry, "blobs", top["config"]["digest"], CONFIG_TYPES))
            if key is None:
                raise NoSizes(f"{image.registry}: the image's config names no os/architecture")
            sizes[key] = {"digest": digest, "bytes": compressed_bytes(top)}
    except NotPinned as exc:
        raise NoSizes(str(exc)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise NoSizes(failure(image, f"{image.name}@{digest[:19]}", exc)) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise NoSizes(f"{image.registry} sent a manifest specfleet cannot read ({type(exc).__name__}: {exc})") from None
    if not sizes:
        raise NoSizes(f"{image.registry}: the image's index names no platform")
    return dict(sorted(sizes.items()))


def _json(registry: Registry, kind: str, digest: str, accept: str) -> dict:
    """The JSON body of a manifest or blob fetched by `digest`, checked against it."""
    with registry.open(registry.url(kind, digest), "GET", accept) as resp:
        body = resp.read()
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise NoSizes(f"{registry.image.registry} sent a body for {digest[:19]} that does not match that digest")
    doc = json.loads(body)
    if not isinstance(doc, dict):
        raise ValueError(f"{kind} {digest[:19]} is not a JSON object")
    return doc


def sizes_text(platforms: dict[str, dict]) -> str:
    """`linux/amd64 0.12 GB, linux/arm64 21.30 GB`: what `specfleet lock` and `check` print of the sizes."""
    return ", ".join(f"{key} {int(p['bytes']) / 1e9:.2f} GB" for key, p in sorted(platforms.items()))
