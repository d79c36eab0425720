"""TensorRT-LLM's extra-llm-api-config.yml contract, as extracted from upstream (trtllm_llm_args.json beside this file).

Python 3 stdlib only: the trtllm-serve STAND-IN image imports this file too (tests/vm/trtllm_standin), so the
stand-in's validator and the unit test of the rendered profiles read the same extracted table, never specfleet's
own schema (specfleet/llm_options.py). tests/unit/test_trtllm_contract.py checks every rendered profile against it
and compares specfleet's contract (specfleet/trtllm_versions.py) with it field by field: a drift on either side
fails there.

A version is served by the releases read for it (`versions` in the table): a value is accepted only if every one
of them accepts it, and required if any of them requires it (`errors` answers the union of their refusals).
Types are strict: 1 is not true, "5" is not 5.
"""

import difflib
import json
import math
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
        raise ValueError("releases of %s disagree on the validator's imports: %s" % (version, sorted(found)))
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
    return [e if len(by) == len(rels) else "%s (%s)" % (e, ", ".join(by)) for e, by in found.items()]


def release_errors(options, release):
    rel = table()["releases"][release]
    errs = []
    if not isinstance(options, dict):
        return ["<top level>: must be a mapping, got %s" % _typename(options)]
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
        errs.append("%s: expected a mapping (%s), got %s %r" % (path or "<top level>", model, _typename(value), value))
        return
    given = {}
    for key, v in value.items():
        sub = "%s.%s" % (path, key) if path else str(key)
        name = aliases.get(key, key)
        if name in given:
            errs.append("%s: given twice (as %s and %s)" % (sub, given[name], key))
            continue
        if name not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            errs.append("%s: unknown key, not a field of %s (extra inputs are not permitted)%s"
                        % (sub, model, "; did you mean %r?" % hint[0] if hint else ""))
            continue
        given[name] = key
        _check(v, sub, fields[name], rel, errs)


def _check(v, path, spec, rel, errs):
    if v is None:
        if not spec.get("nullable"):
            errs.append("%s: may not be null" % path)
        return
    kind = spec["type"]
    if kind == "bool":
        if not isinstance(v, bool):
            errs.append("%s: expected a bool, got %s %r" % (path, _typename(v), v))
    elif kind in ("int", "float"):
        ok = isinstance(v, int) if kind == "int" else isinstance(v, (int, float))
        if isinstance(v, bool) or not ok or (kind == "float" and not math.isfinite(v)):
            errs.append("%s: expected %s, got %s %r" % (path, "an integer" if kind == "int" else "a number",
                                                         _typename(v), v))
            return
        for op, test in (("ge", lambda a, b: a >= b), ("gt", lambda a, b: a > b),
                         ("le", lambda a, b: a <= b), ("lt", lambda a, b: a < b)):
            if op in spec and not test(v, spec[op]):
                errs.append("%s: must be %s %s, got %r" % (path, {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}[op],
                                                            spec[op], v))
    elif kind == "str":
        if not isinstance(v, str):
            errs.append("%s: expected a string, got %s %r" % (path, _typename(v), v))
    elif kind == "enum":
        if not isinstance(v, str) or v not in spec["values"]:
            errs.append("%s: must be one of %s, got %r" % (path, ", ".join(spec["values"]), v))
    elif kind == "list":
        if not isinstance(v, list):
            errs.append("%s: expected a list, got %s %r" % (path, _typename(v), v))
            return
        if len(v) < spec.get("min_items", 0):
            errs.append("%s: needs at least %d item(s)" % (path, spec["min_items"]))
        for i, x in enumerate(v):
            _check(x, "%s[%d]" % (path, i), spec["items"], rel, errs)
    elif kind == "model":
        _check_model(v, path, spec["model"], rel, errs)
    elif kind == "decoding":
        _check_decoding(v, path, rel, errs)
    else:
        raise ValueError("unknown type %r in the contract table" % kind)


def _check_decoding(v, path, rel, errs):
    dec = rel["decoding"]
    if not isinstance(v, dict):
        errs.append("%s: expected a mapping (a decoding config), got %s %r" % (path, _typename(v), v))
        return
    if "decoding_type" not in v:
        errs.append("%s.decoding_type: field required" % path)
        return
    dt = v["decoding_type"]
    accepted = sorted(n for n in dec["rules"] if n in dec["names"])
    if not isinstance(dt, str) or dt not in dec["names"]:
        errs.append("%s.decoding_type: invalid decoding type %r (accepted: %s)" % (path, dt, ", ".join(accepted)))
        return
    if dt in dec["pytorch_refuses"]:
        errs.append("%s.decoding_type: %s is only supported by the TensorRT engine backend, not pytorch" % (path, dt))
        return
    if dt not in dec["rules"]:
        errs.append("%s.decoding_type: %s is not modelled by the contract table (%s)" % (path, dt, ", ".join(accepted)))
        return
    body = {k: x for k, x in v.items() if k != "decoding_type"}
    before = len(errs)
    _check_model(body, path, dec["names"][dt], rel, errs)
    if len(errs) > before:
        return
    draft = dec["draft_path"]
    present = {draft["field"] if k in draft["aliases"] else k: x for k, x in body.items()}
    rules = dec["rules"][dt]
    for key in rules["present"]:
        if present.get(key) in (None, ""):
            errs.append("%s.%s: required for decoding_type %s" % (path, key, dt))
    spec_fields = rel["models"][dec["names"][dt]]["fields"]
    for key in rules["positive"]:
        if key not in present or present[key] is None:
            default = spec_fields[key].get("default")  # an omitted field takes upstream's default
            if default is None or default <= 0:
                errs.append("%s.%s: required for decoding_type %s (an integer > 0%s)"
                            % (path, key, dt, "" if default is None else "; the default is %r" % default))
            continue
        x = present[key]
        if x <= 0:
            errs.append("%s.%s: must be > 0 for decoding_type %s, got %r" % (path, key, dt, x))
