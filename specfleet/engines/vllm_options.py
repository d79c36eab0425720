"""vLLM's options (`vllm_options`, over a vllm_* profile's): checked against the contract of the vLLM that `vllm_image`
carries (engines/vllm_images.py, engines/vllm_contract.py) and rendered as `vllm serve` arguments. They are checked on
every host where they are set, whatever the deploy: against the host's vLLM profile when it has one (the run's, or
the one it `serves`), else on their own (what needs a profile, whether it serves a draft, is left to that profile's
run).

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
from .fit import Profiles, best_fit
from .vllm_contract import Contract, Spec
from .vllm_images import carries

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


def _speculative_problems(spec: Any, has_draft: bool | None, c: Contract, image: str) -> list[tuple[str, str]]:
    key = f"{VAR}.{SPEC}"
    if not isinstance(spec, dict):
        return [(key, f"expected a mapping (vLLM's SpeculativeConfig), got {type(spec).__name__}")]
    out: list[tuple[str, str]] = []
    for name, value in spec.items():
        field = c.speculative.get(name)
        if field is None:
            out.append((f"{key}.{name}", f"unknown field (vLLM {c.version}'s SpeculativeConfig has no such "
                                         f"field; allowed here: {', '.join(c.speculative)})"))
        elif (problem := _value_problem(value, field)) is not None:
            out.append((f"{key}.{name}", problem))
    if out:
        return out
    method = spec.get("method")
    if method is None:
        return [(f"{key}.method", f"is required (stricter than vLLM, which infers it from the model's config; "
                                  f"allowed: {', '.join(c.methods)})")]
    if spec.get("num_speculative_tokens") is None:
        out.append((f"{key}.num_speculative_tokens", "is required (allowed: an integer > 0)"))
    out += _model_problems(key, method, spec.get("model"), has_draft, c) + _lookup_problems(key, method, spec)
    return out + _start_problems(key, method, spec, c, image)


def _model_problems(key: str, method: str, model: str | None, has_draft: bool | None,
                    c: Contract) -> list[tuple[str, str]]:
    """The draft model against the method (speculative.py:461-486) and the profile (has_draft None: none to fit)."""
    needs = method in c.needs_model
    if needs and model is None:
        return [(f"{key}.model", f"is required for method {method} (the draft's directory in the container)")]
    if not needs and model is not None:
        return [(f"{key}.model", f"is not used by method {method} (allowed: none; the methods that take a model: "
                                 f"{', '.join(c.needs_model)})")]
    if model is not None and (problem := path_problem(model)) is not None:
        return [(f"{key}.model", f"{show(model)} {problem} (allowed: an absolute path in the container, where "
                                 "specfleet mounts the pinned draft)")]
    if has_draft is True and not needs:
        return [(f"{key}.method", f"{method} uses no draft model, but the profile serves one (allowed: "
                                  f"{', '.join(c.needs_model)})")]
    if has_draft is False and needs:
        return [(f"{key}.method", f"{method} needs a draft model, and the profile has none (allowed: "
                                  f"{', '.join(m for m in c.methods if m not in c.needs_model)})")]
    return []


def _start_problems(key: str, method: str, spec: dict[str, Any], c: Contract, image: str) -> list[tuple[str, str]]:
    """What vLLM refuses when it builds the SpeculativeConfig at start, before it loads anything
    (vllm/config/speculative.py of the contract's version, engines/vllm_contract.py)."""
    out: list[tuple[str, str]] = []
    tp = spec.get("draft_tensor_parallel_size")
    if tp is not None and tp not in c.draft_tp:
        out.append((f"{key}.draft_tensor_parallel_size",
                    f"{tp} is refused by vLLM {c.version} at start: a draft's TP is 1 or the target's, which is 1 on "
                    f"one Spark (allowed: {', '.join(map(str, c.draft_tp))})"))
    if method == "suffix" and not carries(image, c.suffix_needs):
        out.append((f"{key}.method", f"suffix decoding needs the {c.suffix_needs} module, which {image} is not known "
                                     f"to carry; vLLM {c.version} refuses it at start (allowed: another method)"))
    if method in c.padded_needed and spec.get("disable_padded_drafter_batch") is True:
        out.append((f"{key}.disable_padded_drafter_batch", f"is refused by vLLM {c.version} at start for method "
                                                           f"{method} (allowed: false, or leave it out)"))
    model = spec.get("model")
    again = next((m for part, m in c.redetected if isinstance(model, str) and part in model.lower()), None)
    if again is not None and method not in c.redetect_skips and again != method:
        part = next(p for p, m in c.redetected if m == again)
        out.append((f"{key}.model", f"{show(model)} has {part!r} in it, so vLLM {c.version} reads the {method} draft "
                                    f"there as method {again} (allowed: a mount point without "
                                    f"{', '.join(repr(p) for p, _ in c.redetected)}, any case)"))
    return out


def _lookup_problems(key: str, method: str, spec: dict[str, Any]) -> list[tuple[str, str]]:
    """ngram's prompt lookup window (speculative.py:491-517; other methods zero it, so giving it is a mistake)."""
    lookup = {k: spec[k] for k in ("prompt_lookup_min", "prompt_lookup_max") if k in spec}
    if lookup and method not in ("ngram", "ngram_gpu"):
        return [(f"{key}.{k}", f"is only used by methods ngram and ngram_gpu, not {method}") for k in lookup]
    if len(lookup) == 2 and lookup["prompt_lookup_min"] > lookup["prompt_lookup_max"]:
        return [(f"{key}.prompt_lookup_min", f"{lookup['prompt_lookup_min']} is above prompt_lookup_max "
                                             f"{lookup['prompt_lookup_max']} (allowed: min <= max)")]
    return []


def problems(options: dict[str, Any], has_draft: bool | None, c: Contract, image: str) -> list[tuple[str, str]]:
    """(key, message) per problem of a host's merged vLLM options, against contract `c` of `image`'s vLLM.
    `has_draft`: whether the host's vLLM profile serves a draft (None: no vLLM profile to fit them to)."""
    out: list[tuple[str, str]] = []
    for name, value in options.items():
        key = f"{VAR}.{name}"
        if name in c.reserved:
            out.append((key, f"is set by specfleet ({c.reserved[name]})"))
        elif name == SPEC:
            out += _speculative_problems(value, has_draft, c, image)
        elif name not in c.engine:
            out.append((key, f"unknown option (vLLM {c.version}'s `vllm serve` has no --{name.replace('_', '-')}"
                             f" that specfleet models; allowed here: {', '.join(sorted(c.engine))}, {SPEC})"))
        elif (problem := _value_problem(value, c.engine[name])) is not None:
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
           checked: dict[str, Any] | None, contract: tuple[Contract, str] | None, profiles: Profiles,
           out: list[Problem]) -> dict[str, Any] | None:
    """A host's vLLM options, lowest first: the defaults' (packaged {} + group_data/all.py), the profile's, the
    inventory's. None, with the problem in `out`: a layer is no mapping. `profile`: the run's (a vLLM profile's options
    are the merged ones); `checked`: the profile they are checked against (the run's, else the one the host serves);
    `contract`: (the contract, the image) of the host's vllm_image (None: that image is refused already). Checked
    whenever they are set: fitted to a vLLM profile's draft when there is one, else on their own."""
    below, var = defaults.get(VAR, {}), deploy_vars.get(VAR, {})
    for layer in (below, var):
        if not isinstance(layer, dict):
            out.append(Problem(host, VAR, f"must be a mapping of vLLM engine arguments, got {type(layer).__name__}"))
            return None
    def over(p: dict[str, Any] | None) -> dict[str, Any]:
        mine = p["options"] if p is not None and p["engine"] == "vllm" else None
        return deep_merge(deep_merge(below, mine), var) if mine is not None else deep_merge(below, var)

    def found(p: dict[str, Any]) -> list[Problem]:
        assert contract is not None
        return [Problem(host, key, message) for key, message in problems(over(p), bool(p["draft"]), *contract)]

    if contract is not None and checked is not None and checked["engine"] == "vllm":
        out += found(checked)
    elif contract is not None and over(None):  # set, for a host of no vLLM profile: fitted to every one
        out += best_fit("vllm", profiles, lambda name: found(profiles[name]))
    return over(profile) if profile is not None and profile["engine"] == "vllm" else var
