"""Staging a release on a host in one command (stdlib; installed next to the host tool, which imports it).

The converge sends a release's files as one bundle (Layout.stage_argv, from steps/release.py) instead
of one pyinfra file operation per file: each of those is a stat, an upload, a move, a chown and a chmod through sudo,
37 commands for a release (26 s of a 90 s rollout stage on an emulated lab guest). The bundle holds only rendered,
non-secret files (the token never is one: it goes over stdin to its own root-only file).

A new release is built in a hidden directory beside `releases/` and renamed into place, so `releases/<id>/` is either
whole or absent (a controller that dies midway leaves no half release for the host tool, or the release state, to
find). A release that is
already there (its id is a hash of its content, so this repairs a damaged one) gets each differing file replaced
atomically, and keeps a valid release.json: that records when the release was first staged."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

from hostlib import Fail, atomic_write, read_json
from layout import DRAFT_LINK, RECORD_FILE, RELEASE_ID

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # a file of a release directory: no path, not hidden
STAGING = ".stage-"  # a release being built, inside releases/ (hidden: a dot name is never a release)


def decode(text: str, drafts_dir: str) -> tuple[dict[str, str], str, str | None]:
    """(files, record, draft target) of a bundle (Layout.stage_argv), or Fail (why) for anything but a release's plain
    files and a draft link into `drafts_dir`."""
    try:
        data = json.loads(base64.b64decode(text.encode(), validate=True))
        files, record, draft = data["files"], data["record"], data["draft"]
    except (ValueError, KeyError, TypeError):
        raise Fail("stage: the bundle is not a release bundle (base64 JSON: files, record, draft)") from None
    if not isinstance(files, dict) or not isinstance(record, str) or not files:
        raise Fail("stage: the bundle has no files or no release record")
    for name, content in files.items():
        if not NAME.fullmatch(name) or name in (RECORD_FILE, DRAFT_LINK) or not isinstance(content, str):
            raise Fail(f"stage: {name!r} is not a release file name (a plain name, not {RECORD_FILE} or {DRAFT_LINK})")
    if draft is not None and not (isinstance(draft, str) and draft.startswith(drafts_dir.rstrip("/") + "/")
                                  and "/../" not in draft + "/"):
        raise Fail(f"stage: the draft link's target {draft!r} is not under {drafts_dir}")
    return files, record, draft


def stage(layout, rid: str, bundle: str) -> list[str]:
    """Make `releases/<rid>/` hold the bundle's files (root's, 0755 directories, 0644 files, whatever the umask);
    what it wrote (names), for the log."""
    if not re.fullmatch(RELEASE_ID, rid):
        raise Fail(f"stage: {rid!r} is not a release id")
    files, record, draft = decode(bundle, layout.drafts)
    releases = Path(layout.releases)
    releases.mkdir(parents=True, exist_ok=True)
    _own(releases, 0o755)
    for cut_short in releases.glob(f"{STAGING}*"):  # one stage at a time (the run lock): any other is a leftover
        try:
            shutil.rmtree(cut_short)
        except OSError as exc:
            raise Fail(f"stage: cannot remove {cut_short}, left by a stage cut short: {exc}") from None
    rdir = releases / rid
    if not rdir.is_dir():
        tmp = releases / f"{STAGING}{rid}"  # hidden: never listed as a release (release_state.release_ids)
        tmp.mkdir()
        _own(tmp, 0o755)
        _fill(tmp, files, record, draft)
        os.rename(tmp, rdir)
        return sorted([*files, RECORD_FILE, *([DRAFT_LINK] if draft else [])])
    _own(rdir, 0o755)
    written = [name for name, content in sorted(files.items()) if _write(rdir / name, content)]
    if draft and (not (rdir / DRAFT_LINK).is_symlink() or os.readlink(rdir / DRAFT_LINK) != draft):
        _link(rdir / DRAFT_LINK, draft)
        written.append(DRAFT_LINK)
    if read_json(rdir / RECORD_FILE) is None:  # absent, or damaged (emptied by a power loss right after a stage)
        _write(rdir / RECORD_FILE, record)
        written.append(RECORD_FILE)
    else:
        _own(rdir / RECORD_FILE, 0o644)
    return written


def _own(path: Path, mode: int) -> None:
    """`mode`, and root's (as the status read wants it) when run as root: a repair of a mode or owner gone wrong."""
    path.chmod(mode)
    if os.geteuid() == 0:
        os.chown(path, 0, 0)


def _write(path: Path, content: str) -> bool:
    """Whether it wrote `content` (atomically); mode 0644 and owner root either way (a repair, as `_own`)."""
    changed = atomic_write(path, content, 0o644)
    _own(path, 0o644)
    return changed


def _fill(folder: Path, files: dict[str, str], record: str, draft: str | None) -> None:
    for name, content in files.items():
        _write(folder / name, content)
    if draft:
        _link(folder / DRAFT_LINK, draft)
    _write(folder / RECORD_FILE, record)  # last: a release.json means a complete release


def _link(path: Path, target: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    os.symlink(target, tmp)
    os.replace(tmp, path)
