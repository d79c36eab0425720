"""The profile format's rules (pure): a profile file read, extended and checked, each problem one
`profiles/NAME.yml: KEY: what is wrong (what is allowed)` line (fleet/profiles.py reads the files).

Checked: unknown keys, the name (the file's, unique, not a packaged profile's), `extends`, the engine, the target and
the draft (Hub repo ids, revisions, file patterns; the draft's mount under the container's model directory), the
options against the engine's contract for the image the profile runs on (its own `image`, else the project's
default for the engine: the inventory's image is checked again per host), the server's flags, the nodes, the memory
override and the smoke request. Every value that reaches a shell, a unit file, a path or a URL has a grammar here.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..engines.catalog import ENGINES, Engine
from ..host.layout import CONTAINER_TIKTOKEN, PAIR_MOUNT
from ..serving.options import PATH_RULE, path_problem, show
from . import grammars
from .problems import Problem
from .tunables import load_defaults, load_overrides

NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
NAME_RULE = "allowed: a lowercase letter, then lowercase letters, digits or '_', at most 48 characters"
# huggingface_hub's repo id (utils/_validators.py validate_repo_id), with the namespace required and ASCII only
REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
REPO_RULE = ("allowed: a Hub repo id ORG/NAME of letters, digits, '.', '_', '-', no '--' or '..', not ending in "
             "'.git'")
PATTERN = re.compile(r"[A-Za-z0-9._*?/\[\]!-]{1,200}")
PATTERN_RULE = "allowed: a glob of letters, digits, '.', '_', '-', '/', '*', '?', '[', ']', '!'"
# The container's model directory: a draft is mounted under it, away from what specfleet mounts there itself
MODEL_ROOT = "/opt/"
TAKEN = (CONTAINER_TIKTOKEN, PAIR_MOUNT)
TEXT_MAX = 300
SMOKE_KEYS = {"prompt": "a non-empty string", "max_tokens": "an integer from 1 to 32768",
              "temperature": "a number from 0 to 2"}

KEYS: dict[str, str] = {
    "name": "the profile's name: the file's name without .yml",
    "extends": "a packaged profile this one changes",
    "engine": "the engine that serves it",
    "description": "one line, shown by `specfleet profiles`",
    "source": "where its values come from",
    "target": "the served model: repo, revision, ignore_patterns",
    "draft": "the draft model: repo, mount, revision, ignore_patterns (null: none)",
    "tiktoken": "whether the server reads tiktoken encodings (gpt-oss)",
    "nodes": "Sparks that serve it as one server: 1, or 2 (a pair_* group)",
    "min_version": "the oldest engine version it runs on",
    "image": "the engine's image it runs on (else the fleet's)",
    "serve_flags": "the server's command-line flags",
    "options": "the engine's options, in its own terms",
    "smoke": "the request each release must answer: prompt, max_tokens, temperature",
    "memory": "the memory fit's override: overhead_fraction",
}
REQUIRED = ("name", "engine", "description", "target", "smoke")
MODEL_KEYS = {"target": ("repo", "revision", "ignore_patterns"), "draft": ("repo", "mount", "revision",
                                                                          "ignore_patterns")}


def _unknown(key: str, allowed) -> str:
    close = difflib.get_close_matches(key, list(allowed), n=1)
    return ("unknown key" + (f"; did you mean {close[0]}?" if close else "")
            + f" (allowed: {', '.join(allowed)})")


def _text(value: Any, required: bool = True) -> str | None:
    if not isinstance(value, str) or (required and not value.strip()):
        return f"{show(value)} is not a non-empty string"
    if not value.isprintable() or len(value) > TEXT_MAX:
        return f"{show(value)} is not one line of printable text of at most {TEXT_MAX} characters"
    return None


def _repo_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not REPO.fullmatch(value) or ".." in value or "--" in value \
            or value.endswith(".git"):
        return f"{show(value)} is not a Hub repo id ({REPO_RULE})"
    return None


def _grammar(check, value: Any) -> str | None:
    try:
        check(value)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def _model_problems(role: str, model: Any) -> list[tuple[str, str]]:
    if not isinstance(model, dict):
        return [(role, f"expected a mapping ({', '.join(MODEL_KEYS[role])}), got {type(model).__name__}")]
    out = [(f"{role}.{k}", _unknown(k, MODEL_KEYS[role])) for k in model if k not in MODEL_KEYS[role]]
    if "repo" not in model:
        out.append((f"{role}.repo", "is required (allowed: a Hub repo id ORG/NAME)"))
    elif (problem := _repo_problem(model["repo"])) is not None:
        out.append((f"{role}.repo", problem))
    if "revision" in model and (problem := _grammar(grammars.check_revision, model["revision"])):
        out.append((f"{role}.revision", problem))
    patterns = model.get("ignore_patterns", [])
    if not isinstance(patterns, list):
        out.append((f"{role}.ignore_patterns", f"expected a list of globs, got {type(patterns).__name__}"))
    else:
        out += [(f"{role}.ignore_patterns", f"{show(p)} is not a file pattern ({PATTERN_RULE})")
                for p in patterns if not isinstance(p, str) or not PATTERN.fullmatch(p) or p.startswith("-")]
    if role == "draft":
        out += _mount_problems(model.get("mount"))
    return out


def _mount_problems(mount: Any) -> list[tuple[str, str]]:
    where = f"allowed: a directory under {MODEL_ROOT} other than {', '.join(TAKEN)}; {PATH_RULE}"
    if mount is None:
        return [("draft.mount", f"is required: where the draft is mounted in the container ({where})")]
    if not isinstance(mount, str) or (problem := path_problem(mount)) is not None:
        return [("draft.mount", f"{show(mount)} {problem or 'is not a path'} ({where})")]
    body = mount.rstrip("/")
    if not body.startswith(MODEL_ROOT) or any(body == t or body.startswith(t + "/") or t.startswith(body + "/")
                                              for t in TAKEN):
        return [("draft.mount", f"{show(mount)} is outside the container's model directory ({where})")]
    return []


def _smoke_problems(smoke: Any) -> list[tuple[str, str]]:
    if not isinstance(smoke, dict):
        return [("smoke", f"expected a mapping ({', '.join(SMOKE_KEYS)}), got {type(smoke).__name__}")]
    out = [(f"smoke.{k}", _unknown(k, SMOKE_KEYS)) for k in smoke if k not in SMOKE_KEYS]
    prompt, tokens, temp = smoke.get("prompt"), smoke.get("max_tokens"), smoke.get("temperature", 0)
    if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > 8192:
        out.append(("smoke.prompt", f"{show(prompt)} is not a prompt (allowed: {SMOKE_KEYS['prompt']}, at most 8192 "
                                    "characters)"))
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= 32768:
        out.append(("smoke.max_tokens", f"{show(tokens)} is out of range (allowed: {SMOKE_KEYS['max_tokens']})"))
    if isinstance(temp, bool) or not isinstance(temp, int | float) or not 0 <= temp <= 2:
        out.append(("smoke.temperature", f"{show(temp)} is out of range (allowed: {SMOKE_KEYS['temperature']})"))
    return out


def _flag_problems(engine: Engine, flags: Any) -> list[tuple[str, str]]:
    if not engine.serve_flags:
        return [("serve_flags", f"{engine.server} takes no flags of a profile (allowed: its arguments as `options`)")]
    if not isinstance(flags, list):
        return [("serve_flags", f"expected a list of arguments, got {type(flags).__name__}")]
    out = []
    for flag in flags:
        if not isinstance(flag, str) or not flag or not flag.isprintable() or any(c.isspace() for c in flag):
            out.append(("serve_flags", f"{show(flag)} is not one argument (allowed: strings of printable characters "
                                       "without spaces, one argument each)"))
        elif flag.split("=", 1)[0] in engine.reserved_flags:
            out.append(("serve_flags", f"{show(flag)} is set by specfleet (allowed: flags other than "
                                       f"{', '.join(engine.reserved_flags)})"))
    return out


def _image_of(engine: Engine, raw: dict[str, Any], defaults: dict[str, Any]) -> str:
    image = raw.get("image")
    return image if isinstance(image, str) else str(defaults.get(engine.image_var, ""))


def check(label: str, raw: dict[str, Any], defaults: dict[str, Any]) -> tuple[dict[str, Any] | None, list[Problem]]:
    """One profile (extended already) as loaded, or None and its problems."""
    out: list[tuple[str, str]] = [(k, _unknown(k, KEYS)) for k in raw if k not in KEYS]
    out += [(k, f"is required ({KEYS[k]})") for k in REQUIRED if k not in raw]
    plugin = ENGINES.get(raw["engine"]) if isinstance(raw.get("engine"), str) else None
    if "engine" in raw and plugin is None:
        out.append(("engine", f"{show(raw['engine'])} is not an engine (allowed: {', '.join(ENGINES)})"))
    for key in ("description", "source"):
        if key in raw and (problem := _text(raw[key], key == "description")):
            out.append((key, problem))
    if "target" in raw:
        out += _model_problems("target", raw["target"])
    if raw.get("draft") is not None:
        out += _model_problems("draft", raw["draft"])
    if "tiktoken" in raw and not isinstance(raw["tiktoken"], bool):
        out.append(("tiktoken", f"{show(raw['tiktoken'])} is not true or false"))
    if "smoke" in raw:
        out += _smoke_problems(raw["smoke"])
    out += _memory_problems(raw.get("memory", {}))
    if "image" in raw and (problem := _grammar(grammars.check_image, raw["image"])):
        out.append(("image", problem))
    if plugin is not None:
        out += _engine_problems(plugin, raw, defaults, out)
    if out or plugin is None:
        return None, [Problem(label, key, message) for key, message in out]
    return _loaded(plugin, raw), []


def _memory_problems(memory: Any) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not isinstance(memory, dict) or set(memory) - {"overhead_fraction"}:
        out.append(("memory", f"{show(memory)} is not a mapping of overhead_fraction (allowed: overhead_fraction, "
                              "a number from 0 to 10: the weights' fraction a server needs beyond them)"))
    elif "overhead_fraction" in memory:
        value = memory["overhead_fraction"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 10:
            out.append(("memory.overhead_fraction", f"{show(value)} is out of range (allowed: a number from 0 to 10)"))
    return out


def _engine_problems(engine: Engine, raw: dict[str, Any], defaults: dict[str, Any],
                     found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    nodes = raw.get("nodes", 1)
    allowed_nodes = (1, 2) if engine.pairs else (1,)
    if isinstance(nodes, bool) or nodes not in allowed_nodes:
        what = "1 or 2 (a pair_* group's two Sparks)" if engine.pairs else f"1 ({engine.server} serves no pair)"
        out.append(("nodes", f"{show(nodes)} is not accepted (allowed: {what})"))
    if "serve_flags" in raw:
        out += _flag_problems(engine, raw["serve_flags"])
    if "min_version" in raw:
        out += [("min_version", p) for p in engine.min_version_problems(raw["min_version"])]
    image = _image_of(engine, raw, defaults)
    if "image" in raw and not any(k == "image" for k, _ in found) and (problem := engine.image_problem(image)):
        return [*out, ("image", problem)]
    options = raw.get("options", {})
    if not isinstance(options, dict):
        return [*out, ("options", f"expected a mapping of {engine.server}'s options, got {type(options).__name__}")]
    if any(k.startswith("draft") for k, _ in found) or engine.image_problem(image):
        return out  # the options are checked with a valid draft, on an image of a known version
    draft = raw.get("draft")
    spec = options.get("speculative_config")
    given = spec.get(engine.draft_key) if isinstance(spec, dict) else None
    if draft is not None and given is not None and given != draft["mount"]:
        return [*out, (f"options.speculative_config.{engine.draft_key}",
                       f"{show(given)} is not draft.mount {show(draft['mount'])} (allowed: leave it out, "
                       "draft.mount sets it)")]
    return out + [(f"options.{key}", message)
                  for key, message in engine.option_problems(_with_mount(engine, options, draft), draft is not None,
                                                             image)]


def _with_mount(engine: Engine, options: dict[str, Any], draft: dict[str, Any] | None) -> dict[str, Any]:
    """The options with the draft's mount under the engine's draft key (where the engine reads it)."""
    spec = options.get("speculative_config")
    if draft is None or not isinstance(spec, dict):
        return options
    return {**options, "speculative_config": {**spec, engine.draft_key: draft["mount"]}}


def _loaded(engine: Engine, raw: dict[str, Any]) -> dict[str, Any]:
    profile = {k: v for k, v in raw.items() if k != "extends"}
    profile.setdefault("draft", None)
    profile.setdefault("nodes", 1)
    profile.setdefault("tiktoken", False)
    profile.setdefault("options", {})
    profile["target"] = {"ignore_patterns": [], **profile["target"]}
    if profile["draft"] is not None:
        profile["draft"] = {"ignore_patterns": [], **profile["draft"]}
    if engine.serve_flags:
        profile.setdefault("serve_flags", [])
    profile["options"] = _with_mount(engine, profile["options"], profile["draft"])
    return profile


def merged(base: Any, over: Any) -> Any:
    """`extends`: mappings merge key by key, other values (lists too) replace; None replaces (drops a draft)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = merged(base[key], value) if key in base and value is not None else value
        return out
    return over


def _read(label: str, text: str) -> tuple[dict[str, Any] | None, list[Problem]]:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return None, [Problem(label, "(file)", f"is not valid YAML{where} (allowed: a YAML mapping, docs/profiles.md)")]
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        return None, [Problem(label, "(file)", f"is not a mapping of keys, got {type(raw).__name__} (allowed: a YAML "
                                               "mapping, docs/profiles.md)")]
    return raw, []


@dataclass(frozen=True)
class Catalog:
    profiles: dict[str, dict[str, Any]]  # name -> the loaded profile, packaged first, then the project's by name
    origin: dict[str, str]  # name -> "packaged" or the project file it came from (profiles/NAME.yml)
    problems: list[Problem]  # the project's profile files' problems (host: the file)


def load_catalog(packaged: dict[str, str], project_texts: dict[str, str], root: Path) -> Catalog:
    """The Catalog of the packaged profiles' texts and the project's files' texts (label -> text)."""
    overrides, override_problems = load_overrides(root)
    defaults = {**load_defaults(), **(overrides if not override_problems else {})}
    profiles: dict[str, dict[str, Any]] = {}
    raws: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for name, text in packaged.items():
        raw, problems = _read(f"specfleet/profiles/{name}.yml", text)
        assert raw is not None and not problems, problems
        profile, problems = check(f"specfleet/profiles/{name}.yml", raw, defaults)
        assert profile is not None, [str(p) for p in problems]  # tests/unit/test_profiles.py
        profiles[name], raws[name], origin[name] = profile, raw, "packaged"
    all_problems: list[Problem] = []
    for label, text in project_texts.items():
        stem = Path(label).stem
        raw, problems = _read(label, text)
        if raw is not None:
            raw, problems = _project_raw(label, stem, raw, raws)
        if raw is not None:
            profile, problems = check(label, raw, defaults)
            if profile is not None:
                profiles[stem], origin[stem] = profile, label
        all_problems += problems
    return Catalog(profiles, origin, all_problems)


def _project_raw(label: str, stem: str, raw: dict[str, Any],
                 packaged: dict[str, dict[str, Any]]) -> tuple[dict[str, Any] | None, list[Problem]]:
    """A project file's profile with its `extends` applied; the name's and the file name's rules."""
    if not label.endswith(".yml"):
        return None, [Problem(label, "(file)", "is not named NAME.yml (allowed: profiles/NAME.yml)")]
    if not NAME.fullmatch(stem):
        return None, [Problem(label, "(file)", f"{show(stem)} is not a profile name ({NAME_RULE})")]
    if stem in packaged:
        return None, [Problem(label, "name", f"{stem!r} is a packaged profile's name; a project profile may not "
                                             f"shadow one (allowed: another name, with `extends: {stem}` to change "
                                             "it)")]
    if raw.get("name") != stem:
        return None, [Problem(label, "name", f"{show(raw.get('name'))} is not the file's name (allowed: {stem!r})")]
    if "extends" not in raw:
        return raw, []
    base = raw["extends"]
    if not isinstance(base, str) or base not in packaged:
        return None, [Problem(label, "extends", f"{show(base)} is not a packaged profile (allowed: "
                                                f"{', '.join(packaged)})")]
    if "engine" in raw and raw["engine"] != packaged[base]["engine"]:
        return None, [Problem(label, "engine", f"{show(raw['engine'])} is not {base}'s engine, whose options it "
                                               f"extends (allowed: {packaged[base]['engine']}, or no extends)")]
    keep = {k: v for k, v in packaged[base].items() if k not in ("name", "source", "description")}
    return merged(keep, raw), []

