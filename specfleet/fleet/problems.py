"""A problem with the user's input, said in one line: `HOST: KEY: what is wrong (what is allowed)`.

Every check on the controller reports this way (settings, overrides, lock); nothing raises a traceback for user
input. Pydantic's validation errors, of the settings and of the TensorRT-LLM options, are said this way here.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic_core import ErrorDetails

from ..serving.options import ALL_DECODING_TYPES, SCHEMAS, Schema, allowed_keys, show
from .grammars import PATTERN_RULES


@dataclass
class Problem:
    host: str
    key: str
    message: str

    def __str__(self) -> str:
        # One line, whatever the input held: control characters (e.g. in a misspelled key) are shown escaped.
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"{self.host}: {self.key}: {self.message}")


def grouped_lines(problems: list[Problem], groups: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The problems as lines, each (key, message) once: a problem several hosts share (a bad value set for a group, or
    for `all`) is one line naming the smallest group that holds exactly those hosts, `GROUP (H1, H2): KEY: ...`, else
    `H1, H2: KEY: ...`; a host's own problem stays `HOST: KEY: ...`. In the order each first appears."""
    hosts: dict[tuple[str, str], list[str]] = {}
    for p in problems:
        seen = hosts.setdefault((p.key, p.message), [])
        if p.host not in seen:
            seen.append(p.host)
    out = []
    for (key, message), names in hosts.items():
        if len(names) == 1:
            out.append(str(Problem(names[0], key, message)))
            continue
        exact = sorted((g for g, members in groups.items() if set(members) == set(names)),
                       key=lambda g: (g == "all", g))
        who = f"{exact[0]} ({', '.join(names)})" if exact else ", ".join(names)
        out.append(str(Problem(who, key, message)))
    return out


def error_key(loc: tuple) -> str:
    """The dotted key of a pydantic error's location (the tagged union's decoding types left out)."""
    return ".".join(str(p) for p in loc if p not in ALL_DECODING_TYPES) or "value"


def error_message(err: ErrorDetails) -> str:
    """A pydantic error of the settings, said as what is wrong (and what is allowed)."""
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch":
        rule = PATTERN_RULES.get(str(err["loc"][0])) if err["loc"] else None
        return f"{show(err['input'])} has characters that are not allowed here" + (f" ({rule})" if rule else "")
    if err["type"] == "model_type":  # a config block that is not a mapping (pydantic names the generated class)
        return f"expected a mapping, got {type(err['input']).__name__} {err['input']!r}"
    if err["type"] in ("int_type", "bool_type", "string_type", "float_type", "dict_type", "list_type"):
        return f"{msg.lower()}, got {type(err['input']).__name__} {err['input']!r}"
    return msg[0].lower() + msg[1:] if msg else msg


def llm_error_message(err: ErrorDetails, schema: Schema) -> str:
    """A pydantic error of the TensorRT-LLM options, said with what `schema`'s version accepts."""
    types = ", ".join(schema.decoding_types)
    if err["type"] == "extra_forbidden":
        allowed = allowed_keys(tuple(err["loc"]), schema) or []
        close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown option (trtllm-serve refuses it{hint}); allowed here: {', '.join(allowed)}"
    if err["type"] == "union_tag_invalid":
        given = err["input"].get("decoding_type")
        own = schema.contract.decoding_names.get(given) if isinstance(given, str) else None
        newer = [v for v, other in SCHEMAS.items() if given in other.decoding_types]
        hint = (f"; {schema.version} names it {own}" if own and own != given else
                f"; image release:{newer[0]} accepts it" if newer else "")
        return (f"decoding_type {err['input'].get('decoding_type')!r} is not accepted by trtllm-serve {schema.version} "
                f"(allowed: {types}{hint})")
    if err["type"] == "union_tag_not_found":
        return f"decoding_type is required (allowed: {types})"
    return error_message(err)
