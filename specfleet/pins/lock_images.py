"""The images part of the lock file: per image reference its registry digest and, per platform of that digest, the
platform manifest's digest and compressed size.

    images:
      nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6:
        image_digest: sha256:...              # null, with a `note`, when the image is in no registry
        platforms:                            # absent: a lock written before sizes were recorded, or the registry
          linux/amd64: {digest: 'sha256:...', bytes: 123456789}     # did not tell them
          linux/arm64: {digest: 'sha256:...', bytes: 21300000000}

`specfleet lock` fills `platforms` for the pinned digest without moving the pin; a registry that cannot tell the
sizes leaves them absent (a note, not an error)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .image_sizes import NoSizes, sizes_text
from .images import DIGEST_PATTERN, NotPinned

DigestOf = Callable[[str], str]
SizesOf = Callable[[str, str], dict[str, dict]]


def image_digests(digest: str | None, platforms: dict[str, dict] | None) -> tuple[str, ...]:
    """Every digest the lock records for one image: its own (an index's, or a single manifest's) and each platform
    manifest's. A local image is the pinned one when docker has it under one of them (host/docker_images.pinned).
    Empty: the image is not pinned (run by its tag, as docker does)."""
    if not digest:
        return ()
    return tuple(dict.fromkeys([digest, *(p["digest"] for _, p in sorted((platforms or {}).items()))]))


def read_image_entry(e: dict) -> dict:
    """One `images:` entry of a lock file as the Lock holds it; a malformed entry raises ValueError/KeyError/..."""
    entry: dict = {"image_digest": e.get("image_digest")}
    if e.get("note"):
        entry["note"] = e["note"]
    if e.get("platforms") is not None:
        platforms = {}
        for key, p in e["platforms"].items():
            if not DIGEST_PATTERN.fullmatch(str(p["digest"])):
                raise ValueError(f"platforms.{key}.digest is not sha256:<64 hex>")
            platforms[str(key)] = {"digest": str(p["digest"]), "bytes": int(p["bytes"])}
        entry["platforms"] = dict(sorted(platforms.items()))
    return entry


def lock_images(refs: list[str], old: dict[str, dict], redo: set[str], digest_of: DigestOf,
                sizes_of: SizesOf) -> tuple[dict[str, dict], list[str], dict[str, str]]:
    """Every reference of `refs`: the old entry (its sizes filled in when missing), else (or for a reference in
    `redo`) the registry's digest and sizes, or null with a note when the controller cannot learn it (an image loaded
    with docker load is in no registry). Returns the entries, the lines to print (what was pinned or moved, what got
    sizes, what is not pinned or has no sizes) and, per pinned reference of `redo` whose look-up failed, why: its pin
    cannot move, and is not to be dropped for it."""
    images: dict[str, dict] = {}
    lines: list[str] = []
    stuck: dict[str, str] = {}
    for ref in sorted(refs):
        before = old.get(ref)
        if before is not None and ref not in redo:
            entry = images[ref] = dict(before)
            if not entry.get("image_digest"):
                lines.append(f"image {ref}: not pinned in the lock ({before.get('note', 'no digest')}); "
                             f"specfleet lock --upgrade {ref} tries again")
            elif "platforms" not in entry:
                sized = _sizes(ref, entry, sizes_of, lines)
                if sized:
                    lines.append(f"image {ref}: sizes recorded ({sized})")
            continue
        was = (before or {}).get("image_digest")
        try:
            digest = digest_of(ref)
        except NotPinned as exc:
            if was:
                stuck[ref] = str(exc)
                continue
            images[ref] = {"image_digest": None, "note": f"not pinned: {exc}"}
            lines.append(f"image {ref}: not pinned ({exc}); hosts run it by its tag")
            continue
        entry = images[ref] = {"image_digest": digest}
        kept = (before or {}).get("platforms") if was == digest else None  # the same digest weighs the same
        if kept:
            entry["platforms"] = kept
        notes: list[str] = []
        sized = sizes_text(kept) if kept else _sizes(ref, entry, sizes_of, notes)
        what = (f"{was[7:19]} -> {digest[7:19]}" if was and was != digest
                else f"unchanged ({digest[:19]})" if was else f"pinned to {digest}")
        lines += [f"image {ref}: {what}" + (f" ({sized})" if sized else ""), *notes]
    return images, lines, stuck


def _sizes(ref: str, entry: dict, sizes_of: SizesOf, lines: list[str]) -> str | None:
    """Record the sizes of `entry`'s digest in it; the text to print, or None with a note in `lines`."""
    try:
        entry["platforms"] = sizes_of(ref, entry["image_digest"])
    except NoSizes as exc:
        lines.append(f"image {ref}: sizes not recorded ({exc}); the next specfleet lock tries again")
        return None
    return sizes_text(entry["platforms"])


def image_size_line(image: str, digest: str | None, platforms: dict[str, dict] | None, lock_file: Path | str,
                    command: str) -> str:
    """What `specfleet check` prints of an image the fleet runs: its size per platform, or why it is unknown."""
    if platforms:
        return f"image {image}: {sizes_text(platforms)}"
    if not digest:
        return f"image {image}: size unknown: not pinned to a registry digest (run by its tag)"
    return f"image {image}: size unknown: {lock_file} predates image sizes (run: {command})"
