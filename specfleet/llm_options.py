"""Schema of extra-llm-api-config.yml as trtllm-serve (pytorch backend) accepts it, per TensorRT-LLM version.

Every model forbids unknown keys, like TensorRT-LLM's own config models: a misspelled key anywhere
makes the real server refuse to start, so specfleet refuses it before touching a host. Only the options
listed here are accepted; extend the schema (with a source) when a genuine option is missing.

The schema is selected by the TensorRT-LLM version in the `image` tag (`schema_for_image`):

| TensorRT-LLM | image tag | differs from 1.2.0rc6 |
|---|---|---|
| 1.2.0rc6 (default) | `release:1.2.0rc6` | - (the playbook's original image; the default `image`) |
| 1.3.0rc12 | `release:1.3.0rc12` | `decoding_type: Eagle3` accepted (same fields as `Eagle`; the build treats `Eagle` as Eagle3 too) |

Everything else (every key, type and rule) is the same for both: the playbook moved to 1.3.0rc12 with the
same YAML keys, and no source we have shows another difference. Rule: the version is the tag's leading
`X.Y.Z` with an optional `rcN` (`1.3.0rc12`, `1.3.0rc12-mirror`, `1.3.0rc12.post1` -> 1.3.0rc12); a
version not in SCHEMAS, or a tag that names none (`latest`, no tag, digest only), gets the 1.2.0rc6
schema, the strictest one known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]

# Absolute paths that reach a shell, a systemd unit or a `docker run -v SRC:DST:ro` spec (settings.py uses
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


class CudaGraphConfig(_Strict):
    max_batch_size: NonNegInt | None = None
    batch_sizes: list[PosInt] | None = None
    enable_padding: bool = False


class KvCacheConfig(_Strict):
    free_gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    enable_block_reuse: bool = True
    max_tokens: PosInt | None = None
    max_attention_window: list[PosInt] | None = None
    sink_token_length: NonNegInt | None = None
    host_cache_size: NonNegInt | None = None
    onboard_blocks: bool = True
    enable_partial_reuse: bool = True
    copy_on_partial_reuse: bool = True
    use_uvm: bool = False
    dtype: str = "auto"


class MoeConfig(_Strict):
    backend: str = "CUTLASS"
    max_num_tokens: PosInt | None = None


class _SpecBase(_Strict):
    max_draft_len: int | None = None
    speculative_model_dir: str | None = None

    @field_validator("speculative_model_dir")
    @classmethod
    def _v_model_dir(cls, v: str | None) -> str | None:
        # The draft is mounted there: `docker run -v <current>/draft:<speculative_model_dir>:ro` in the unit.
        return None if v is None else check_path(v)

    def _need_draft_len(self) -> None:
        if self.max_draft_len is None or self.max_draft_len <= 0:
            raise ValueError(f"max_draft_len must be an integer > 0 for decoding_type {self.decoding_type}")

    def _need_model_dir(self) -> None:
        if not self.speculative_model_dir:
            raise ValueError(f"speculative_model_dir (the draft checkpoint dir) is required for decoding_type {self.decoding_type}")
        if not self.speculative_model_dir.startswith("/"):
            raise ValueError("speculative_model_dir must be an absolute path inside the container")


class EagleConfig(_SpecBase):
    decoding_type: Literal["Eagle"]
    eagle3_one_model: bool = True
    eagle3_layers_to_capture: list[int] | None = None
    max_non_leaves_per_layer: PosInt | None = None
    num_eagle_layers: PosInt | None = None
    greedy_sampling: bool = True
    use_dynamic_tree: bool = False

    @model_validator(mode="after")
    def _check(self):
        self._need_draft_len()
        self._need_model_dir()
        return self


class Eagle3Config(EagleConfig):
    """Accepted from 1.3.0rc12 on: the same fields as Eagle (which those builds also run as Eagle3)."""

    decoding_type: Literal["Eagle3"]


class DraftTargetConfig(_SpecBase):
    decoding_type: Literal["DraftTarget"]

    @model_validator(mode="after")
    def _check(self):
        self._need_draft_len()
        self._need_model_dir()
        return self


class NGramConfig(_SpecBase):
    decoding_type: Literal["NGram"]
    max_matching_ngram_size: int | None = None
    is_keep_all: bool = True
    is_use_oldest: bool = True
    is_public_pool: bool = True

    @model_validator(mode="after")
    def _check(self):
        self._need_draft_len()
        if self.max_matching_ngram_size is None or self.max_matching_ngram_size <= 0:
            raise ValueError("max_matching_ngram_size must be an integer > 0 for decoding_type NGram")
        return self


class MTPConfig(_SpecBase):
    decoding_type: Literal["MTP"]
    num_nextn_predict_layers: PosInt = 1
    use_relaxed_acceptance_for_thinking: bool = False
    relaxed_topk: PosInt = 1
    relaxed_delta: float = 0.0


class UserProvidedConfig(_SpecBase):
    decoding_type: Literal["UserProvided"]


class SaveStateConfig(_SpecBase):
    decoding_type: Literal["SaveState"]
    output_directory: str
    write_interval: PosInt = 20
    file_prefix: str = "data"
    eagle3_layers_to_capture: list[int] | None = None


class AutoConfig(_SpecBase):
    decoding_type: Literal["AUTO"]


# decoding_type values accepted by the 1.2.0rc6 build (Eagle3 only by newer builds; Medusa and
# Lookahead only on the TensorRT engine backend), each with its config model.
SPEC_CONFIGS: dict[str, type[_SpecBase]] = {
    "Eagle": EagleConfig, "DraftTarget": DraftTargetConfig, "NGram": NGramConfig, "MTP": MTPConfig,
    "UserProvided": UserProvidedConfig, "SaveState": SaveStateConfig, "AUTO": AutoConfig,
}
DECODING_TYPES = tuple(SPEC_CONFIGS)
# 1.3.0rc12: the same plus Eagle3.
SPEC_CONFIGS_1_3: dict[str, type[_SpecBase]] = {**SPEC_CONFIGS, "Eagle3": Eagle3Config}
ALL_DECODING_TYPES = tuple(SPEC_CONFIGS_1_3)

SpeculativeConfig = Annotated[
    Union[EagleConfig, DraftTargetConfig, NGramConfig, MTPConfig, UserProvidedConfig, SaveStateConfig, AutoConfig],
    Field(discriminator="decoding_type"),
]
SpeculativeConfig13 = Annotated[
    Union[EagleConfig, Eagle3Config, DraftTargetConfig, NGramConfig, MTPConfig, UserProvidedConfig, SaveStateConfig,
          AutoConfig],
    Field(discriminator="decoding_type"),
]


class LlmApiOptions(_Strict):
    """Top level of extra-llm-api-config.yml (a TorchLlmArgs subset)."""

    disable_overlap_scheduler: bool = False
    enable_autotuner: bool = True
    enable_attention_dp: bool = False
    enable_chunked_prefill: bool = False
    enable_iter_perf_stats: bool = False
    print_iter_log: bool = False
    max_batch_size: PosInt | None = None
    max_num_tokens: PosInt | None = None
    max_seq_len: PosInt | None = None
    max_input_len: PosInt | None = None
    max_beam_width: PosInt | None = None
    tensor_parallel_size: PosInt | None = None
    pipeline_parallel_size: PosInt | None = None
    moe_expert_parallel_size: PosInt | None = None
    trust_remote_code: bool = False
    attn_backend: str = "TRTLLM"
    sampler_type: Literal["TRTLLMSampler", "TorchSampler", "auto"] = "auto"
    stream_interval: PosInt = 1
    cuda_graph_config: CudaGraphConfig | None = None
    kv_cache_config: KvCacheConfig | None = None
    moe_config: MoeConfig | None = None
    speculative_config: SpeculativeConfig | None = None


class LlmApiOptions13(LlmApiOptions):
    """1.3.0rc12: as 1.2.0rc6, plus decoding_type Eagle3."""

    speculative_config: SpeculativeConfig13 | None = None


@dataclass(frozen=True)
class Schema:
    version: str  # the TensorRT-LLM version whose strictness it follows
    options: type[LlmApiOptions]
    spec_configs: dict[str, type[_SpecBase]]

    @property
    def decoding_types(self) -> tuple[str, ...]:
        return tuple(self.spec_configs)


DEFAULT_VERSION = "1.2.0rc6"
SCHEMAS: dict[str, Schema] = {
    "1.2.0rc6": Schema("1.2.0rc6", LlmApiOptions, SPEC_CONFIGS),
    "1.3.0rc12": Schema("1.3.0rc12", LlmApiOptions13, SPEC_CONFIGS_1_3),
}
_TAG_VERSION = re.compile(r"([0-9]+\.[0-9]+\.[0-9]+(?:rc[0-9]+)?)(?![0-9A-Za-z])")


def image_version(image: str) -> str | None:
    """The TensorRT-LLM version an image tag names (`.../release:1.3.0rc12` -> 1.3.0rc12), or None."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in name:
        return None
    match = _TAG_VERSION.match(name.split(":", 1)[1])
    return match.group(1) if match else None


def schema_for_image(image: Any) -> Schema:
    """The schema of the image's TensorRT-LLM version; 1.2.0rc6's for unknown versions (module docstring)."""
    version = image_version(image) if isinstance(image, str) else None
    return SCHEMAS.get(version or "", SCHEMAS[DEFAULT_VERSION])


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key (recursively); any other value in `override` replaces."""
    out = dict(base)
    for key, value in override.items():
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
    return sorted(getattr(model, "model_fields", {}))


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None
