"""The serving engines as data: what each one is called, which vars hold its image and options, how its server is
reached and what it counts.

A profile names its engine (fleet/profiles.py, `engine`); everything else asks the host's `Engine` here instead of
comparing names, so that another engine is a new entry, not a new branch in every feature
(tests/unit/test_engine_branches.py keeps engine names and `engine ==` inside this package). The argv each engine's
container runs is rendered in engines/command.py; vLLM's options are checked in engines/vllm_options.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from ..fleet.problems import error_key, llm_error_message
from ..host.layout import CONFIG_FILE
from ..serving.options import SCHEMAS, schema_for_image, show
from . import vllm_images, vllm_options
from .vllm_contract import COUNTERS as VLLM_COUNTERS

Problems = list[tuple[str, str]]  # (key under the options, what is wrong (what is allowed))


@dataclass(frozen=True)
class Counters:
    """Where a server counts speculative decoding, and what: THE acceptance arithmetic
    (overview/host/overview.py `acceptance_from_counters`) takes deltas of these over a window.

    `format`: "prometheus" (a text exposition that a read does not consume) or "iterations" (trtllm-serve's JSON
    iteration stats, which a read removes from the server's queue). `drafts`, `draft_tokens`, `accepted`: the
    counter names (prometheus only)."""

    format: str
    path: str
    drafts: str = ""
    draft_tokens: str = ""
    accepted: str = ""

    @property
    def scrapable(self) -> bool:
        """Whether a read leaves them as they are (so Prometheus may read them: gateway/rules.py relays them)."""
        return self.format == "prometheus"

    def record(self) -> dict[str, Any]:
        """As the release record and the bench's load client carry them: {format, path, names}."""
        names = [self.drafts, self.draft_tokens, self.accepted] if self.scrapable else []
        return {"format": self.format, "path": self.path, "names": names}


@dataclass(frozen=True)
class Engine:
    name: str
    server: str  # what the unit's description and messages call the server process
    unit: str  # the serving unit's and container's name when service_name is not set
    options_file: str  # the release's options file (engines/command.py options_file)
    image_var: str  # the var holding the image that runs it
    options_var: str  # the var users override its options with (a mapping, validated per engine)
    pairs: bool  # whether it can serve a two-Spark pair (pair/launch.py's mpirun is TensorRT-LLM's)
    validates_in_image: bool  # whether the release step checks the rendered options with the image's own classes
    checked_by: str  # what in the image checks them (engines/check.py)
    mounts_config: bool  # whether the release's options file is mounted into the container (read by the server)
    # the flag given the engine's share of the unified memory, and the var that holds it ("": the engine sizes its
    # memory from what is free at load, as TensorRT-LLM's free_gpu_memory_fraction does)
    memory_fraction_flag: str
    memory_fraction_var: str
    counters: Counters
    # where the draft is mounted in the container, read from a host's settings (its options name it)
    draft_dir: Callable[[Any], str | None]
    method_key: str  # the speculative_config key naming its method
    draft_key: str  # the speculative_config key a profile's draft.mount is written under (fleet/profile_rules.py)
    serve_flags: bool  # whether a profile gives the server flags of its own (serve_flags)
    reserved_flags: tuple[str, ...]  # the server's flags specfleet renders itself
    # a profile's options against the contract of an image's engine version (has_draft: the profile serves a draft)
    option_problems: Callable[[dict[str, Any], bool, str], Problems]
    image_problem: Callable[[str], str | None]  # why an image's options cannot be checked (None: they can)
    min_version_problems: Callable[[Any], list[str]]  # what is wrong with a profile's min_version
    draft_len: str  # the speculative_config key of the tokens drafted per step (a bench sweeps it)
    # what every bench variant adds to the options: the counters' source on, prefix caching off (a bench replays its
    # prompts; served profiles keep their caching)
    bench_options: dict[str, Any]


def _trtllm_option_problems(options: dict[str, Any], has_draft: bool, image: str) -> Problems:
    schema = schema_for_image(image)
    merged = schema.for_version(schema.canonical_aliases(options))
    try:
        schema.options.model_validate(merged)
    except ValidationError as exc:
        return [(error_key(err["loc"]), llm_error_message(err, schema)) for err in exc.errors()]
    if has_draft and not schema.draft_path(merged):
        return [("speculative_config", f"the profile serves a draft model: speculative_config with "
                                       f"{schema.contract.draft_field} is required")]
    if not has_draft and schema.needs_draft(merged):
        return [("speculative_config", f"the profile has no draft model; "
                                       f"{merged['speculative_config']['decoding_type']} needs one")]
    return []


def _trtllm_min_version(value: Any) -> list[str]:
    try:
        Version(value if isinstance(value, str) else "?")
    except InvalidVersion:
        return [f"{show(value)} is not a TensorRT-LLM version (allowed: a version such as 1.3.0rc12)"]
    return []


def _vllm_option_problems(options: dict[str, Any], has_draft: bool, image: str) -> Problems:
    prefix = vllm_options.VAR + "."
    return [(k.removeprefix(prefix), m)
            for k, m in vllm_options.problems(options, has_draft, vllm_images.contract_of(image), image)]


TRTLLM = Engine(
    name="trtllm", server="trtllm-serve", unit="specfleet-trtllm", options_file=CONFIG_FILE, image_var="image",
    options_var="extra_llm_api_options", pairs=True,
    validates_in_image=True, checked_by="TensorRT-LLM", mounts_config=True, memory_fraction_flag="",
    memory_fraction_var="",
    # 1.2.0rc6 and 1.3.0rc12 count acceptance in the JSON iteration stats only (docs/engines.md, "Acceptance")
    counters=Counters("iterations", "/metrics"),
    draft_dir=lambda s: SCHEMAS[s.trtllm_version].draft_path(s.llm_api_options),
    method_key="decoding_type", draft_key="speculative_model_dir", serve_flags=True,
    reserved_flags=("--host", "--port", "--config", "--extra_llm_api_options"),
    option_problems=_trtllm_option_problems, image_problem=lambda image: None,
    min_version_problems=_trtllm_min_version, draft_len="max_draft_len",
    bench_options={"enable_iter_perf_stats": True, "kv_cache_config": {"enable_block_reuse": False}},
)
VLLM = Engine(
    name="vllm", server="vllm serve", unit="specfleet-vllm", options_file="vllm-options.yml", image_var="vllm_image",
    options_var="vllm_options", pairs=False,
    validates_in_image=True, checked_by="vLLM", mounts_config=False, memory_fraction_flag="--gpu-memory-utilization",
    memory_fraction_var="vllm_gpu_memory_utilization",
    counters=Counters("prometheus", "/metrics", *VLLM_COUNTERS),
    draft_dir=lambda s: vllm_options.draft_path(s.vllm_options),
    method_key="method", draft_key="model", serve_flags=False, reserved_flags=(),
    option_problems=_vllm_option_problems, image_problem=vllm_images.image_problem,
    min_version_problems=lambda value: ["vLLM's version is its image's (allowed: no min_version; set image)"],
    draft_len="num_speculative_tokens",
    bench_options={"enable_prefix_caching": False},
)
ENGINES: dict[str, Engine] = {e.name: e for e in (TRTLLM, VLLM)}
DEFAULT = TRTLLM  # a host without a profile (a gateway, a mirror, a profile-less deploy): `image` is its image var


def engine_of(profile: dict[str, Any] | None) -> Engine:
    """The engine a profile runs on (a profile-less host: the default, whose image var is `image`)."""
    return ENGINES[profile["engine"]] if profile else DEFAULT


def speculative(profile: dict[str, Any]) -> dict[str, Any]:
    """A profile's speculative config ({}: it does not speculate)."""
    return profile.get("options", {}).get("speculative_config") or {}


def memory_fraction(s: Any) -> float | None:
    """The share of the memory the host's engine is told it may take (None: its engine sizes from what is free)."""
    var = s.engine.memory_fraction_var
    return float(getattr(s, var)) if var else None


def draft_len(profile: dict[str, Any]) -> int:
    """Tokens the profile drafts per step (0: no speculation)."""
    spec = speculative(profile)
    return int(spec.get(engine_of(profile).draft_len) or 0) if spec else 0
