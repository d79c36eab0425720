"""TensorRT-LLM's options of one host (`extra_llm_api_options` over its profile's), merged and checked against the
contract of its image's TensorRT-LLM version (serving/options.py), fitted to its profile (engines/fit.py) (pure)."""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from ..fleet.problems import Problem, error_key, llm_error_message
from ..serving.options import Schema, deep_merge, image_version, schema_for_image, show
from .fit import Profiles, best_fit

VAR = "extra_llm_api_options"


def trtllm_options(host: str, image: Any, defaults: dict[str, Any], deploy_vars: dict[str, Any],
                   profile_name: str | None, checked: str | None, profiles: Profiles,
                   problems: list[Problem]) -> tuple[Schema, dict[str, Any]] | None:
    """The image version's schema and the merged options, lowest first: the defaults' (packaged {} +
    group_data/all.py), the run profile's, the inventory's. Checked whenever they are set, against `checked` when it is
    a TensorRT-LLM profile, else fitted to every TensorRT-LLM profile (engines/fit.py). None: a layer is no mapping."""
    base, extra = defaults.get(VAR, {}), deploy_vars.get(VAR, {})
    for layer in (base, extra):
        if not isinstance(layer, dict):
            problems.append(Problem(host, VAR, f"must be a mapping of TRT-LLM options, got {type(layer).__name__}"))
            return None
    # Profiles are written in 1.2.0rc6's names: renamed to the image version's; a user's alias of the draft key is
    # spelled with the version's own name, so the rendered file has one spelling.
    schema = schema_for_image(image)
    base, extra = schema.canonical_aliases(base), schema.canonical_aliases(extra)

    def over(name: str | None) -> dict[str, Any]:
        mine = profiles[name]["options"] if name and profiles[name]["engine"] == "trtllm" else None
        return deep_merge(deep_merge(base, schema.for_version(mine)) if mine is not None else base, extra)

    merged = over(profile_name)
    if checked is not None and profiles[checked]["engine"] == "trtllm":
        problems += _problems(host, over(checked), schema, checked, profiles)
    elif deep_merge(base, extra):  # set, for a host of no TensorRT-LLM profile: fitted to every one
        problems += best_fit("trtllm", profiles, lambda name: _problems(host, over(name), schema, name, profiles))
    return schema, merged


def _problems(host: str, merged: dict[str, Any], schema: Schema, profile_name: str | None,
              profiles: Profiles) -> list[Problem]:
    """The merged options against the schema, and the draft model against the profile (if all else is valid)."""
    out: list[Problem] = []
    try:
        schema.options.model_validate(merged)
    except ValidationError as exc:
        out += [Problem(host, f"{VAR}." + error_key(err["loc"]), llm_error_message(err, schema))
                for err in exc.errors()]
    if out or profile_name is None:
        return out
    profile = profiles[profile_name]
    if profile.get("draft") and not schema.draft_path(merged):
        out.append(Problem(host, f"{VAR}.speculative_config", f"profile {profile_name} serves a draft model: "
                                                            f"speculative_config with {schema.contract.draft_field} "
                                                            "is required"))
    if not profile.get("draft") and schema.needs_draft(merged):
        out.append(Problem(host, f"{VAR}.speculative_config", f"profile {profile_name} has no draft model; "
                                                            f"{merged['speculative_config']['decoding_type']} needs "
                                                            "one"))
    return out


def image_version_problem(host: str, image: Any, profile_name: str, profiles: Profiles) -> Problem | None:
    """A profile with a minimum TensorRT-LLM version (min_trtllm) needs an image whose tag names that version or a
    newer one: a tag that names none cannot show it (the stricter reading)."""
    need = profiles[profile_name].get("min_version")
    if need is None or not isinstance(image, str):
        return None
    have = image_version(image)
    try:
        too_old = have is None or Version(have) < Version(need)
    except InvalidVersion:
        too_old = True
    if not too_old:
        return None
    what = f"is TensorRT-LLM {have}" if have else "names no TensorRT-LLM version in its tag"
    return Problem(host, "image", f"{show(image)} {what}; profile {profile_name} needs {need} or newer "
                                  f"(allowed: an image tagged {need} or later, e.g. "
                                  f"nvcr.io/nvidia/tensorrt-llm/release:{need})")
