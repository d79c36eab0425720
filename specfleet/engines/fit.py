"""Engine options fitted to the profile they will serve (pure): a host's `extra_llm_api_options` and `vllm_options`
are checked wherever they are set, whatever the deploy.

- Against the host's profile when it has one: the run's, else the one its `serves` names (that run skips the host, but
  its own deploy's next run would check them so).
- Else (no profile named: a gateway, a host of a profile-less deploy) against every profile of their engine: options
  that fit one of them pass, since they override a profile that is chosen later; options that fit none are refused with
  the problems of the profile they fit best, which the line names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..fleet.problems import Problem

Profiles = dict[str, dict[str, Any]]  # name -> profile (fleet/profiles.py)


def engine_profiles(engine: str, profiles: Profiles) -> list[str]:
    """The single-Spark profiles of an engine, in their order (a pair's profile needs its pair group)."""
    return [p for p, v in profiles.items() if v["engine"] == engine and v["nodes"] == 1]


def checked_profile(profile_name: str | None, serves: Any, profiles: Profiles) -> str | None:
    """The profile a host's engine options are checked against: the run's, else the one it serves."""
    return profile_name or (serves if isinstance(serves, str) and serves in profiles else None)


def best_fit(engine: str, profiles: Profiles, problems_with: Callable[[str], list[Problem]]) -> list[Problem]:
    """[] when the options fit one of the engine's profiles; else the problems with the one they fit best (the fewest),
    each line naming it."""
    best: tuple[str, list[Problem]] | None = None
    for name in engine_profiles(engine, profiles):
        found = problems_with(name)
        if not found:
            return []
        if best is None or len(found) < len(best[1]):
            best = (name, found)
    if best is None:
        return []
    name, found = best
    return [Problem(p.host, p.key, f"{p.message}; checked with profile {name}, the {engine} profile these options fit "
                                   "best (the host serves none of them by name)") for p in found]
