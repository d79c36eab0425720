"""vLLM's options (`vllm_options`, over a vllm_* profile's): checked against the pinned vLLM's contract
(engines/vllm_contract.py) and rendered as `vllm serve` arguments.

Written here rather than by importing vLLM: vLLM is a CUDA wheel of gigabytes that cannot be installed on the
controller, and its own checks of a speculative config load the models' configs. So the contract is data read from
upstream's source of the pinned version (with provenance), and this module refuses, in one `HOST: KEY: ...` line per
problem, what that source refuses, taking the stricter reading where the source leaves room (marked there).

Rendering: a key becomes `--key-with-dashes`; a bool becomes `--flag` or `--no-flag` (vLLM's bool arguments are
`argparse.BooleanOptionalAction`); `speculative_config` becomes `--speculative-config` and compact JSON (vLLM parses the
flag's value with `json.loads`); every other value is one argument. No value is ever split or passed to a shell: the
unit quotes each argument for systemd (fleet/templating.py).
"""

from __future__ import annotations

import json
from typing import Any

from ..fleet.problems import Problem
from ..serving.options import deep_merge, path_problem, show
from .vllm_contract import CONTRACT, Spec

VAR = "vllm_options"
SPEC = "speculative_config"


def draft_path(options: dict[str, Any]) -> str | None:
    """Where the draft is mounted in the container: speculative_config.model (None without one)."""
    spec = options.get(SPEC)
    model = spec.get("model") if isinstance(spec, dict) else None
    return model if isinstance(model, str) else None


def _value_problem(value: Any, spec: Spec) -> str | None:
    """What is wrong with `value` for a field spec, or None."""
    kind, cons = spec
    if kind == "bool":
        ok = isinstance(value, bool)
        want = "true or false"
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = "an integer"
    elif kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        want = "a number"
    elif kind == "str":
        ok = isinstance(value, str) and value.isprintable() and bool(value) and not value.startswith("-")
        want = "a non-empty string of printable characters, not starting with '-'"
    else:  # an enum: kind is the tuple of allowed values
        if value not in kind:
            return f"{show(value)} is not accepted (allowed: {', '.join(kind)})"
        return None
    if not ok:
        return f"{show(value)} is not {want}"
    for op, bound in cons.items():
        bad = {"gt": value <= bound, "ge": value < bound, "le": value > bound, "lt": value >= bound}[op]
        if bad:
            said = {"gt": ">", "ge": ">=", "le": "<=", "lt": "<"}[op]
            return f"{show(value)} is out of range (allowed: {want} {said} {bound})"
    return None


def _speculative_problems(spec: Any, has_draft: bool) -> list[tuple[str, str]]:
    key = f"{VAR}.{SPEC}"
    if not isinstance(spec, dict):
        return [(key, f"expected a mapping (vLLM's SpeculativeConfig), got {type(spec).__name__}")]
    out: list[tuple[str, str]] = []
    for name, value in spec.items():
        field = CONTRACT.speculative.get(name)
        if field is None:
            out.append((f"{key}.{name}", f"unknown field (vLLM {CONTRACT.version}'s SpeculativeConfig has no such "
                                         f"field; allowed here: {', '.join(CONTRACT.speculative)})"))
        elif (problem := _value_problem(value, field)) is not None:
            out.append((f"{key}.{name}", problem))
    if out:
        return out
    method = spec.get("method")
    if method is None:
        return [(f"{key}.method", f"is required (stricter than vLLM, which infers it from the model's config; "
                                  f"allowed: {', '.join(CONTRACT.methods)})")]
    if spec.get("num_speculative_tokens") is None:
        out.append((f"{key}.num_speculative_tokens", "is required (allowed: an integer > 0)"))
    out += _model_problems(key, method, spec.get("model"), has_draft) + _lookup_problems(key, method, spec)
    return out


def _model_problems(key: str, method: str, model: str | None, has_draft: bool) -> list[tuple[str, str]]:
    """The draft model against the method (speculative.py:461-486) and the profile."""
    needs = method in CONTRACT.needs_model
    if needs and model is None:
        return [(f"{key}.model", f"is required for method {method} (the draft's directory in the container)")]
    if not needs and model is not None:
        return [(f"{key}.model", f"is not used by method {method} (allowed: none; the methods that take a model: "
                                 f"{', '.join(CONTRACT.needs_model)})")]
    if model is not None and (problem := path_problem(model)) is not None:
        return [(f"{key}.model", f"{show(model)} {problem} (allowed: an absolute path in the container, where "
                                 "specfleet mounts the pinned draft)")]
    if has_draft and not needs:
        return [(f"{key}.method", f"{method} uses no draft model, but the profile serves one (allowed: "
                                  f"{', '.join(CONTRACT.needs_model)})")]
    if not has_draft and needs:
        return [(f"{key}.method", f"{method} needs a draft model, and the profile has none (allowed: "
                                  f"{', '.join(m for m in CONTRACT.methods if m not in CONTRACT.needs_model)})")]
    return []


def _lookup_problems(key: str, method: str, spec: dict[str, Any]) -> list[tuple[str, str]]:
    """ngram's prompt lookup window (speculative.py:491-517; other methods zero it, so giving it is a mistake)."""
    lookup = {k: spec[k] for k in ("prompt_lookup_min", "prompt_lookup_max") if k in spec}
    if lookup and method not in ("ngram", "ngram_gpu"):
        return [(f"{key}.{k}", f"is only used by methods ngram and ngram_gpu, not {method}") for k in lookup]
    if len(lookup) == 2 and lookup["prompt_lookup_min"] > lookup["prompt_lookup_max"]:
        return [(f"{key}.prompt_lookup_min", f"{lookup['prompt_lookup_min']} is above prompt_lookup_max "
                                             f"{lookup['prompt_lookup_max']} (allowed: min <= max)")]
    return []


def problems(options: dict[str, Any], has_draft: bool) -> list[tuple[str, str]]:
    """(key, message) per problem of the merged options of a host whose profile runs on vLLM."""
    out: list[tuple[str, str]] = []
    for name, value in options.items():
        key = f"{VAR}.{name}"
        if name in CONTRACT.reserved:
            out.append((key, f"is set by specfleet ({CONTRACT.reserved[name]})"))
        elif name == SPEC:
            out += _speculative_problems(value, has_draft)
        elif name not in CONTRACT.engine:
            out.append((key, f"unknown option (vLLM {CONTRACT.version}'s `vllm serve` has no --{name.replace('_', '-')}"
                             f" that specfleet models; allowed here: {', '.join(sorted(CONTRACT.engine))}, {SPEC})"))
        elif (problem := _value_problem(value, CONTRACT.engine[name])) is not None:
            out.append((key, problem))
    if has_draft and not isinstance(options.get(SPEC), dict):
        out.append((f"{VAR}.{SPEC}", "is required: the profile serves a draft model"))
    return out


def argv(options: dict[str, Any]) -> list[str]:
    """The validated options as `vllm serve` arguments, in the mapping's order."""
    out: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + name.replace("_", "-"))
        elif isinstance(value, dict):
            out += [flag, json.dumps(value, separators=(",", ":"), sort_keys=True)]
        else:
            out += [flag, str(value)]
    return out


def merged(host: str, defaults: dict[str, Any], deploy_vars: dict[str, Any], profile: dict[str, Any] | None,
           out: list[Problem]) -> dict[str, Any] | None:
    """A host's vLLM options, lowest first: the defaults' (packaged {} + group_data/all.py), the profile's, the
    inventory's; checked when the profile has vLLM options (it runs on vLLM). None, with the problem in `out`: a layer
    is no mapping. A host of another engine keeps its var as given (nothing reads it)."""
    below, var = defaults.get(VAR, {}), deploy_vars.get(VAR, {})
    for layer in (below, var):
        if not isinstance(layer, dict):
            out.append(Problem(host, VAR, f"must be a mapping of vLLM engine arguments, got {type(layer).__name__}"))
            return None
    mine = profile.get(VAR) if profile else None
    if profile is None or mine is None:
        return var
    options = deep_merge(deep_merge(below, mine), var)
    out += [Problem(host, key, message) for key, message in problems(options, bool(profile["draft"]))]
    return options
