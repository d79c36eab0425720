"""TensorRT-LLM's extra-llm-api-config.yml contract, as extracted from upstream (trtllm_llm_args.json beside this file).

Python 3 stdlib only: the trtllm-serve STAND-IN image imports this file too (tests/vm/trtllm_standin), so the
stand-in's validator and the unit test of the rendered profiles read the same extracted table, never specfleet's
own schema (specfleet/serving/options.py). tests/unit/test_trtllm_contract.py checks every rendered profile against it
and compares specfleet's contract (specfleet/serving/contract.py) with it field by field: a drift on either side
fails there.

A version is served by the releases read for it (`versions` in the table): a value is accepted only if every one
of them accepts it, and required if any of them requires it (`errors` answers the union of their refusals).
Types are strict: 1 is not true, "5" is not 5.
"""

import difflib
import json
import math
import operator
import os

TABLE_PATH = os.environ.get("TRTLLM_CONTRACT_TABLE") or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                     "trtllm_llm_args.json")
_TABLE = None


def table():
    global _TABLE
    if _TABLE is None:
        with open(TABLE_PATH, encoding="utf-8") as fh:
            _TABLE = json.load(fh)
    return _TABLE


def versions():
    return sorted(table()["versions"])


def releases(version):
    """The upstream releases read for `version` (KeyError: a version the table does not have)."""
    return table()["versions"][version]["read"]


def _all(version, key):
    return [table()["releases"][r][key] for r in releases(version)]


def serve_flags(version):
    """trtllm-serve's flags for the YAML that every release of the version takes."""
    sets = [set(d) for d in _all(version, "serve_flags")]
    return sorted(set.intersection(*sets))


def validator_imports(version):
    """(module, names) the in-image validation imports; the releases must agree (else ValueError)."""
    found = {(d["module"], tuple(d["names"])) for d in _all(version, "validator_imports")}
    if len(found) != 1:
        raise ValueError(f"releases of {version} disagree on the validator's imports: {sorted(found)}")
    module, names = found.pop()
    return module, list(names)


def draft_keys(version):
    """The speculative_config keys that name the draft checkpoint in every release of the version."""
    sets = [{d["draft_path"]["field"], *d["draft_path"]["aliases"]} for d in _all(version, "decoding")]
    return sorted(set.intersection(*sets))


def decoding_types(version):
    """decoding_type names every release of the version accepts on the pytorch backend (and the table models)."""
    sets = []
    for d in _all(version, "decoding"):
        sets.append({n for n in d["rules"] if n in d["names"] and n not in d["pytorch_refuses"]})
    return sorted(set.intersection(*sets))


def errors(options, version):
    """Every refusal of `options` (the parsed YAML) by any release read for `version`: 'path: what', followed by
    '(RELEASE)' when not every release read refuses it."""
    found = {}
    rels = releases(version)
    for r in rels:
        for e in release_errors(options, r):
            found.setdefault(e, []).append(r)
    return [e if len(by) == len(rels) else f"{e} ({', '.join(by)})" for e, by in found.items()]


def release_errors(options, release):
    rel = table()["releases"][release]
    errs = []
    if not isinstance(options, dict):
        return [f"<top level>: must be a mapping, got {_typename(options)}"]
    _check_model(options, "", "TorchLlmArgs", rel, errs)
    return errs


def _typename(v):
    """The YAML type name of a value, for messages (the stand-in's too)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    return {int: "int", float: "float", str: "string", list: "list", dict: "mapping"}.get(type(v), type(v).__name__)


def _check_model(value, path, model, rel, errs, extra_fields=None):
    spec = rel["models"][model]
    fields = dict(spec["fields"])
    aliases = {}
    if extra_fields:
        fields.update(extra_fields)
    if model.endswith("DecodingConfig"):
        draft = rel["decoding"]["draft_path"]
        for alias in draft["aliases"]:
            aliases[alias] = draft["field"]
    if not isinstance(value, dict):
        errs.append(f"{path or '<top level>'}: expected a mapping ({model}), got {_typename(value)} {value!r}")
        return
    given = {}
    for key, v in value.items():
        sub = f"{path}.{key}" if path else str(key)
        name = aliases.get(key, key)
        if name in given:
            errs.append(f"{sub}: given twice (as {given[name]} and {key})")
            continue
        if name not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
            errs.append(f"{sub}: unknown key, not a field of {model} (extra inputs are not permitted){did_you_mean}")
            continue
        given[name] = key
        _check(v, sub, fields[name], rel, errs)


def _check(v, path, spec, rel, errs):
    if v is None:
        if not spec.get("nullable"):
            errs.append(f"{path}: may not be null")
        return
    kind = spec["type"]
    if kind not in _CHECKS:
        raise ValueError(f"unknown type {kind!r} in the contract table")
    _CHECKS[kind](v, path, spec, rel, errs)


def _check_bool(v, path, spec, rel, errs):
    if not isinstance(v, bool):
        errs.append(f"{path}: expected a bool, got {_typename(v)} {v!r}")


#: The bounds a number field may carry: table key -> (symbol for messages, test).
_BOUNDS = {"ge": (">=", operator.ge), "gt": (">", operator.gt), "le": ("<=", operator.le), "lt": ("<", operator.lt)}


def _check_number(v, path, spec, rel, errs):
    kind = spec["type"]
    ok = isinstance(v, int) if kind == "int" else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or (kind == "float" and not math.isfinite(v)):
        errs.append(f"{path}: expected {'an integer' if kind == 'int' else 'a number'}, got {_typename(v)} {v!r}")
        return
    for op, (symbol, test) in _BOUNDS.items():
        if op in spec and not test(v, spec[op]):
            errs.append(f"{path}: must be {symbol} {spec[op]}, got {v!r}")


def _check_str(v, path, spec, rel, errs):
    if not isinstance(v, str):
        errs.append(f"{path}: expected a string, got {_typename(v)} {v!r}")


def _check_enum(v, path, spec, rel, errs):
    if not isinstance(v, str) or v not in spec["values"]:
        errs.append(f"{path}: must be one of {', '.join(spec['values'])}, got {v!r}")


def _check_list(v, path, spec, rel, errs):
    if not isinstance(v, list):
        errs.append(f"{path}: expected a list, got {_typename(v)} {v!r}")
        return
    if len(v) < spec.get("min_items", 0):
        errs.append(f"{path}: needs at least {spec['min_items']:d} item(s)")
    for i, x in enumerate(v):
        _check(x, f"{path}[{i}]", spec["items"], rel, errs)


def _check_submodel(v, path, spec, rel, errs):
    _check_model(v, path, spec["model"], rel, errs)


def _check_decoding(v, path, spec, rel, errs):
    dec = rel["decoding"]
    refusal = _decoding_type_refusal(v, path, dec)
    if refusal:
        errs.append(refusal)
        return
    dt = v["decoding_type"]
    body = {k: x for k, x in v.items() if k != "decoding_type"}
    before = len(errs)
    _check_model(body, path, dec["names"][dt], rel, errs)
    if len(errs) == before:
        _check_decoding_rules(body, path, dt, rel, errs)


def _decoding_type_refusal(v, path, dec):
    """Why `v` is not a decoding config the table models (its message), or None."""
    if not isinstance(v, dict):
        return f"{path}: expected a mapping (a decoding config), got {_typename(v)} {v!r}"
    if "decoding_type" not in v:
        return f"{path}.decoding_type: field required"
    dt = v["decoding_type"]
    accepted = ", ".join(sorted(n for n in dec["rules"] if n in dec["names"]))
    if not isinstance(dt, str) or dt not in dec["names"]:
        return f"{path}.decoding_type: invalid decoding type {dt!r} (accepted: {accepted})"
    if dt in dec["pytorch_refuses"]:
        return f"{path}.decoding_type: {dt} is only supported by the TensorRT engine backend, not pytorch"
    if dt not in dec["rules"]:
        return f"{path}.decoding_type: {dt} is not modelled by the contract table ({accepted})"
    return None


def _check_decoding_rules(body, path, dt, rel, errs):
    """The decoding type's own rules on a body whose fields are valid: what must be present, what must be > 0."""
    dec = rel["decoding"]
    draft = dec["draft_path"]
    present = {draft["field"] if k in draft["aliases"] else k: x for k, x in body.items()}
    rules = dec["rules"][dt]
    for key in rules["present"]:
        if present.get(key) in (None, ""):
            errs.append(f"{path}.{key}: required for decoding_type {dt}")
    spec_fields = rel["models"][dec["names"][dt]]["fields"]
    for key in rules["positive"]:
        if key not in present or present[key] is None:
            default = spec_fields[key].get("default")  # an omitted field takes upstream's default
            if default is None or default <= 0:
                default_is = "" if default is None else f"; the default is {default!r}"
                errs.append(f"{path}.{key}: required for decoding_type {dt} (an integer > 0{default_is})")
            continue
        x = present[key]
        if x <= 0:
            errs.append(f"{path}.{key}: must be > 0 for decoding_type {dt}, got {x!r}")


#: The contract table's field types -> their checks.
_CHECKS = {"bool": _check_bool, "int": _check_number, "float": _check_number, "str": _check_str,
           "enum": _check_enum, "list": _check_list, "model": _check_submodel, "decoding": _check_decoding}
