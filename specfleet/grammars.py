"""Small grammars of values specfleet reads back (shared by the settings and the steps)."""

from __future__ import annotations

import re

_PINNED = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)(?:\[[A-Za-z0-9_,-]+\])? ?== ?(?P<version>[A-Za-z0-9.]+)")


def pinned_version(requirement: str, package: str) -> str | None:
    """The exact version of `package==X` (extras and spaces around == allowed); None for any other specifier."""
    m = _PINNED.fullmatch(requirement.strip())
    return m.group("version") if m and m.group("name") == package else None
