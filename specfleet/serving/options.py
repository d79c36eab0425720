"""Schema of extra-llm-api-config.yml as trtllm-serve (pytorch backend) accepts it, per TensorRT-LLM version.

The schema is built from the version's contract (serving/contract.py: every field, alias, enum value, range and
requirement, read from upstream's source of that version, with provenance). Every model forbids unknown keys,
like TensorRT-LLM's own config models: a misspelled key anywhere makes the real server refuse to start, so
specfleet refuses it before touching a host. Types are strict (1 is not true). Only the options modelled are
accepted; extend the contract (with a source) when a genuine option is missing.

The version is the `image` tag's leading `X.Y.Z` with an optional `rcN` (`1.3.0rc12`, `1.3.0rc12-mirror`,
`1.3.0rc12.post1` -> 1.3.0rc12); `contract_version` picks its contract (its own, the one read from it, a guess
by the X.Y line, else 1.2.0rc6's; the in-image validation is the authority for the guesses).

Profiles are written in 1.2.0rc6's names; `for_version` renames them to the version's (decoding_type, the draft
key), and `canonical_aliases` spells a user's alias of the draft key with the version's own name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from .contract import CONTRACTS, DEFAULT_VERSION, Contract  # noqa: F401 (DEFAULT_VERSION re-exported)

# Absolute paths that reach a shell, a systemd unit or a `docker run -v SRC:DST:ro` spec (fleet/settings.py uses
# the same rule for data_dir / secrets_dir): a charset that needs no quoting anywhere, and no ':' or ','.
PATH_MAX = 255
PATH_RULE = ("allowed: an absolute path other than /, names of letters, digits, '.', '_', '-' separated by single '/', "
             f"no '.' or '..' name, at most {PATH_MAX} characters")
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/-]*")


def show(value: Any, limit: int = 80) -> str:
    """repr() of an input value for a one-line message (control characters escaped, long values cut)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 4] + "...'"


def path_problem(value: str) -> str | None:
    """What is wrong with `value` as a safe absolute path (one trailing '/' is tolerated), or None."""
    if not _PATH_CHARS.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _PATH_CHARS.fullmatch(c)}))
        return f"has characters that are not allowed: {bad!r}"
    if not value.startswith("/"):
        return "is not an absolute path"
    if len(value) > PATH_MAX:
        return f"is longer than {PATH_MAX} characters"
    body = value[:-1] if value.endswith("/") else value
    if not body:
        return "is / itself"
    names = body.split("/")[1:]
    if "" in names:
        return "has an empty name ('//')"
    if "." in names or ".." in names:
        return "has a '.' or '..' name"
    return None


def check_path(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(f"{show(value)} {problem} ({PATH_RULE})")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _annotation(spec: tuple, models: dict[str, type[BaseModel]]) -> tuple[Any, Any]:
    """(annotation, default) of a contract field spec (serving/contract.py's module docstring)."""
    kind, nullable, cons = spec
    cons = dict(cons)
    if kind == "list[int]":
        item = Annotated[int, Field(gt=cons.pop("item_gt"))] if "item_gt" in cons else int
        items = list[item]  # type: ignore[valid-type]  # a type built at run time
        ann: Any = Annotated[items, Field(**cons)] if cons else items
    elif isinstance(kind, tuple) and kind[0] == "enum":
        ann = Literal[kind[1]]
    elif isinstance(kind, tuple) and kind[0] == "model":
        ann = models[kind[1]]
    else:
        base = {"int": int, "float": float, "bool": bool, "str": str}[kind]
        ann = Annotated[base, Field(**cons)] if cons else base
    return (ann | None if nullable else ann), None


def _model(name: str, fields: dict[str, tuple], models: dict[str, type[BaseModel]], base: type[BaseModel] = _Strict,
           **extra: Any) -> type:
    definitions: dict[str, Any] = {k: _annotation(v, models) for k, v in fields.items()}
    return create_model(name, __base__=base, **definitions, **extra)


class _SpecBase(_Strict):
    """DecodingBaseConfig: the draft path is checked as a path (it becomes a docker mount) under every spelling."""

    _draft_keys: ClassVar[tuple[str, ...]] = ()  # set per generated class: the version's draft key spellings

    @model_validator(mode="before")
    @classmethod
    def _one_draft_key(cls, data: Any) -> Any:
        if isinstance(data, dict):
            given = [k for k in cls._draft_keys if k in data]
            if len(given) > 1:
                raise ValueError(f"{' and '.join(given)} are the same option (the draft checkpoint dir): give one")
        return data


def _decoding_model(c: Contract, name: str, models: dict[str, type[BaseModel]]) -> type[_SpecBase]:
    rules = c.rules[name]
    fields = {"max_draft_len": c.max_draft_len, **c.decoding[name]}

    def check(self):
        for key in rules["positive"]:
            value = getattr(self, key)
            if value is None:
                value = c.defaults.get((name, key))
            if value is None or value <= 0:
                raise ValueError(f"{key} must be an integer > 0 for decoding_type {name}")
        for key in rules["present"]:
            if not getattr(self, key):
                what = " (the draft checkpoint dir)" if key == c.draft_field else ""
                raise ValueError(f"{key}{what} is required for decoding_type {name}")
        return self

    draft_ann = (str | None, Field(default=None, validation_alias=AliasChoices(*c.draft_keys)))
    definitions: dict[str, Any] = {c.draft_field: draft_ann, **{k: _annotation(v, models) for k, v in fields.items()}}
    # pydantic's decorated validators, which create_model takes although it types them as plain callables
    validators: dict[str, Any] = {"_check": model_validator(mode="after")(check),
                                  "_v_path": field_validator(c.draft_field)(
                                      classmethod(lambda cls, v: None if v is None else check_path(v)))}
    model = create_model(
        f"{name}Config_{c.version.replace('.', '_')}", __base__=_SpecBase,
        decoding_type=(Literal[name], ...), **definitions, __validators__=validators,
    )
    model._draft_keys = c.draft_keys
    return model


@dataclass(frozen=True)
class Schema:
    contract: Contract
    options: type[BaseModel]  # TorchLlmArgs, the top level of the YAML
    spec_configs: dict[str, type[_SpecBase]]  # this version's decoding_type name -> its model

    @property
    def version(self) -> str:
        return self.contract.version

    @property
    def decoding_types(self) -> tuple[str, ...]:
        return tuple(self.spec_configs)

    def for_version(self, options: dict[str, Any]) -> dict[str, Any]:
        """Profile options (1.2.0rc6's names) in this version's names: decoding_type and the draft key."""
        spec = options.get("speculative_config")
        if not isinstance(spec, dict):
            return options
        renamed = {}
        for key, value in spec.items():
            if key == "decoding_type":
                value = self.contract.decoding_names.get(value, value)
            renamed[self.contract.draft_field if key == "speculative_model_dir" else key] = value
        return {**options, "speculative_config": renamed}

    def canonical_aliases(self, options: Any) -> Any:
        """A user layer with the draft key's alias spelled with the version's own name (both given: left as is,
        the schema refuses it)."""
        if not isinstance(options, dict) or not isinstance(options.get("speculative_config"), dict):
            return options
        spec = options["speculative_config"]
        given = [k for k in self.contract.draft_keys if k in spec]
        if len(given) != 1 or given[0] == self.contract.draft_field:
            return options
        spec = {self.contract.draft_field if k == given[0] else k: v for k, v in spec.items()}
        return {**options, "speculative_config": spec}

    def draft_path(self, options: dict[str, Any]) -> str | None:
        """The draft checkpoint dir the options name (any spelling the version accepts)."""
        spec = options.get("speculative_config") or {}
        return next((spec[k] for k in self.contract.draft_keys if spec.get(k)), None)

    def needs_draft(self, options: dict[str, Any]) -> bool:
        spec = options.get("speculative_config") or {}
        rules = self.contract.rules.get(spec.get("decoding_type", ""), {})
        return self.contract.draft_field in rules.get("present", ())


def build_schema(c: Contract) -> Schema:
    models: dict[str, type[BaseModel]] = {}
    for name, fields in c.models.items():
        models[name] = _model(f"{name}_{c.version.replace('.', '_')}", fields, models)
    specs = {name: _decoding_model(c, name, models) for name in c.decoding}
    # a union of the models built at run time: Union[...] takes the tuple, `X | Y` has no such form
    union: Any = Annotated[Union[tuple(specs.values())], Field(discriminator="decoding_type")]  # noqa: UP007
    options = _model(f"TorchLlmArgs_{c.version.replace('.', '_')}", c.top, models,
                     speculative_config=(union | None, None))
    return Schema(c, options, specs)


SCHEMAS: dict[str, Schema] = {v: build_schema(c) for v, c in CONTRACTS.items()}
# key -> its other spellings, over every version (the draft key: speculative_model / speculative_model_dir)
ALIASES: dict[str, tuple[str, ...]] = {k: tuple(o for o in c.draft_keys if o != k)
                                       for c in CONTRACTS.values() if c.draft_aliases for k in c.draft_keys}
ALL_DECODING_TYPES = tuple(dict.fromkeys(n for s in SCHEMAS.values() for n in s.decoding_types))
_TAG_VERSION = re.compile(r"([0-9]+\.[0-9]+\.[0-9]+(?:rc[0-9]+)?)(?![0-9A-Za-z])")


def image_version(image: str) -> str | None:
    """The TensorRT-LLM version an image tag names (`.../release:1.3.0rc12` -> 1.3.0rc12), or None."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _TAG_VERSION.match(name.split(":", 1)[1])
    return match.group(1) if match else None


def contract_version(version: str | None) -> str:
    """The contract an image version is checked with: its own; the contract of a release it was read from
    (1.3.0rc13 -> 1.3.0rc12: what both releases read accept); else, a guess, the contract of the same X.Y line
    (1.3.0rc20 -> 1.3.0rc12); else 1.2.0rc6's. The in-image validation is the authority for the guesses."""
    if not version:
        return DEFAULT_VERSION
    for name, c in CONTRACTS.items():
        if version == name or version in {r.name for r in c.read}:
            return name
    line = [name for name in CONTRACTS if name.split(".")[:2] == version.split(".")[:2]]
    return line[0] if line else DEFAULT_VERSION


def schema_for_image(image: Any) -> Schema:
    """The schema of the contract for the image's TensorRT-LLM version (contract_version)."""
    return SCHEMAS[contract_version(image_version(image) if isinstance(image, str) else None)]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key (recursively); any other value in `override` replaces. Spellings of one option
    (ALIASES: the draft key) count as one key: a level that names it replaces the lower level's spelling."""
    out = dict(base)
    for key, value in override.items():
        for other in ALIASES.get(key, ()):
            if other not in override:  # both spellings in one level stay both: the schema refuses them
                out.pop(other, None)
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def allowed_keys(loc: tuple, schema: Schema | None = None) -> list[str] | None:
    """Field names allowed at a pydantic error location inside a schema's options (for error messages)."""
    schema = schema or SCHEMAS[DEFAULT_VERSION]
    model: Any = schema.options
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if part in schema.spec_configs:
            model = schema.spec_configs[part]
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return None
        model = _model_in(field.annotation)
        if model is None:
            return None
    keys = []
    for name, field in getattr(model, "model_fields", {}).items():
        choices = getattr(field.validation_alias, "choices", None)
        keys += [str(c) for c in choices] if choices else [name]
    return sorted(keys)


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None
