"""The serving profiles: the packaged ones (specfleet/profiles/NAME.yml, package data) and the fleet project's own
(profiles/NAME.yml), one YAML format for both (docs/profiles.md).

A profile names its engine, the target model (a Hub repo, an optional revision and the files left out), an optional
draft (its repo and where it is mounted in the container), the engine's options in the engine's own terms
(TensorRT-LLM's extra-llm-api-config.yml keys, vLLM's engine arguments), the server's flags (TensorRT-LLM), how many
Sparks serve it, the smoke request, a description and its source. Read here, checked by fleet/profile_rules.py before
anything else reads the project: a bad file is one `profiles/NAME.yml: KEY: ...` line, and every command refuses the
project (exit 2).

A project profile may extend a packaged one (`extends: eagle3`, then the keys it changes: mappings merge key by key,
other values replace, `draft: null` drops the draft); it may not take a packaged profile's name.

Loaded profiles are plain mappings in this format, with the draft's mount also written into the options' speculative
config under the engine's draft key (the options the engine reads), and the defaults filled in. `PROFILE_VARS` maps
what a profile may set of the host's vars (its revision, image, memory overhead): they sit between group_data/all.py
and the inventory (fleet/settings.py).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import yaml

from . import project
from .problems import Problem
from .profile_rules import Catalog, load_catalog

PROJECT_FOLDER = "profiles"
PACKAGED_FOLDER = "profiles"  # specfleet/profiles/, package data


class ProfileError(Exception):
    """The project's profiles are refused: one line per problem."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


INDEX = "index.yml"  # the packaged profiles' order


def _packaged_texts() -> dict[str, str]:
    """name -> text of each packaged profile, in the index's order (tests/unit/test_profiles.py: it lists each file)."""
    folder = importlib.resources.files("specfleet").joinpath(PACKAGED_FOLDER)
    order = yaml.safe_load(folder.joinpath(INDEX).read_text(encoding="utf-8"))
    return {name: folder.joinpath(f"{name}.yml").read_text(encoding="utf-8") for name in order}


def _project_files(root: Path) -> list[Path]:
    folder = root / PROJECT_FOLDER
    return sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml")) if folder.is_dir() else []


_cache: dict[Path, tuple[tuple, Catalog]] = {}


def catalog(root: Path | None = None) -> Catalog:
    """Every profile a project can run (root: the project directory, project.project_dir() by default). Read once
    per project and state of its profile files and overrides."""
    root = (root or project.project_dir()).resolve()
    files = _project_files(root)
    # the options are checked against the project's default images: group_data/all.py is part of what was read
    read = [*files, *(f for f in [root / project.OVERRIDES_FILE] if f.exists())]
    stamp = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in read)
    cached = _cache.get(root)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    texts = {f"{PROJECT_FOLDER}/{p.name}": p.read_text(encoding="utf-8", errors="replace") for p in files}
    built = load_catalog(_packaged_texts(), texts, root)
    _cache[root] = (stamp, built)
    return built


def profiles() -> dict[str, dict[str, Any]]:
    """The current project's profiles by name; ProfileError when a project profile file is refused."""
    found = catalog()
    if found.problems:
        raise ProfileError([str(p) for p in found.problems])
    return found.profiles


def profile_problems() -> list[Problem]:
    """The current project's profile files' problems ([]: every file is valid)."""
    return catalog().problems


def nodes(profile: str | None) -> int:
    """How many Sparks serve `profile` as one server (2: a pair_* group's hosts); None or unknown: 1."""
    known = catalog().profiles
    return int(known[profile]["nodes"]) if profile in known else 1


def packaged_names() -> tuple[str, ...]:
    return tuple(_packaged_texts())


def profile_vars(profile: dict[str, Any] | None, image_var: str) -> dict[str, Any]:
    """What a profile sets of its host's vars (between group_data/all.py and the inventory): the target's and the
    draft's revision, the engine's image, the memory overhead."""
    if not profile:
        return {}
    out: dict[str, Any] = {}
    if "revision" in profile["target"]:
        out["target_revision"] = profile["target"]["revision"]
    if profile.get("draft") and "revision" in profile["draft"]:
        out["draft_revision"] = profile["draft"]["revision"]
    if "image" in profile:
        out[image_var] = profile["image"]
    if "overhead_fraction" in (profile.get("memory") or {}):
        out["memory_overhead_fraction"] = profile["memory"]["overhead_fraction"]
    return out

