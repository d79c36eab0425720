"""One validated settings object per host, built from the parsed fleet (fleet/model.py: each host's deploy vars,
split from its connection vars once). Precedence, lowest first: the packaged defaults (specfleet/defaults.py) < the
project's group_data/all.py overrides < the deploy's profile < inventory vars (fleet/tunables.py reads the first two).

Checked here, before any host is contacted: each problem is one `HOST: KEY: what is wrong (what is allowed)` line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator

from ..engines import vllm_options
from ..engines.catalog import DEFAULT as DEFAULT_ENGINE
from ..engines.catalog import Engine, engine_of
from ..engines.fit import checked_profile
from ..engines.trtllm_fit import image_version_problem, trtllm_options
from ..engines.vllm_contract import CONTRACTS as VLLM_CONTRACTS
from ..engines.vllm_contract import Contract as VllmContract
from ..engines.vllm_images import contract_of as vllm_contract_of
from ..engines.vllm_images import image_problem as vllm_image_problem
from ..gateway import rules as gateway_fleet
from ..host.layout import RELEASE_ID
from ..mirror import rules as mirror_fleet
from ..pair import rules as pair_fleet
from ..serving.options import DEFAULT_VERSION, SCHEMAS, Schema, show
from . import grammars, secrets
from .model import Fleet
from .problems import Problem, error_key, error_message
from .profiles import profile_problems, profile_vars, profiles
from .tunables import load_defaults, load_overrides, unknown_variable

SECRET_ENV = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"}
TIKTOKEN_FILES = ("o200k_base.tiktoken", "cl100k_base.tiktoken")

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]

# The grammar each string-valued field is checked against (specfleet/fleet/grammars.py: the rule, and the message naming
# what is allowed). Fields checked by a pydantic `pattern` name their rule in grammars.PATTERN_RULES.
FIELD_GRAMMARS: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("hub_endpoint", "controller_hub_endpoint", "pip_index_url", "tiktoken_base_url"),
                    grammars.check_url),
    "mirror_bind": grammars.check_bind_address,
    "mirror_allowed_networks": grammars.check_networks,
    "mirror_address": grammars.check_address,
    "mirror_python": grammars.check_python,
    **dict.fromkeys(("data_dir", "secrets_dir", "mirror_cache_dir", "image_store_dir"), grammars.check_abs_dir),
    **dict.fromkeys(("image", "vllm_image"), grammars.check_image),
    "ngc_registry": grammars.check_registry,
    "service_name": grammars.check_service_name,
    **dict.fromkeys(("target_revision", "draft_revision"), grammars.check_revision),
    "hub_client_requirement": grammars.check_hub_client_requirement,
    "mirror_requirement": grammars.check_mirror_requirement,
    "hf_token_file": grammars.check_token_file,
    "ngc_api_key_file": grammars.check_token_file,
    "gateway_api_keys_file": grammars.check_token_file,
    "gateway_tls_cert_file": grammars.check_token_file,
    "gateway_tls_key_file": grammars.check_token_file,
    "gateway_bind": grammars.check_bind_address,
    "fleet_address": grammars.check_address,
    "gateway_health_path": grammars.check_http_path,
    "serve_host": grammars.check_serve_host,
    "pair_link_interfaces": grammars.check_ifnames,
    "pair_link_subnets": grammars.check_link_subnets,
    "pair_link_addresses": grammars.check_link_addresses,
}


class Settings(BaseModel):
    """Everything a deploy needs about one host. Built by `build_settings`, never by hand."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    host: str
    profile_name: str | None
    profile: dict[str, Any] | None

    image: str
    gpus: bool
    container_env: dict[str, str]
    serve_host: str
    serve_port: Annotated[int, Field(ge=1, le=65535)]
    extra_llm_api_options: dict[str, Any]
    vllm_image: str
    vllm_gpu_memory_utilization: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    vllm_options: dict[str, Any]  # after build_settings, on a host of a vLLM profile: the profile's merged with the var
    target_revision: str
    draft_revision: str
    hub_endpoint: str
    controller_hub_endpoint: str | None
    hf_token_required: bool
    hf_token_file: str | None
    mirror_port: Annotated[int, Field(ge=1, le=65535)]
    mirror_bind: str
    mirror_engine_port: Annotated[int, Field(ge=1, le=65535)]
    mirror_allowed_networks: list[str]
    mirror_address: str | None
    mirror_cache_dir: str
    mirror_requirement: str
    mirror_python: str
    hub_fallback: bool
    image_mirror: bool
    image_registry_port: Annotated[int, Field(ge=1, le=65535)]
    image_registry_engine_port: Annotated[int, Field(ge=1, le=65535)]
    image_store_dir: str
    image_store_budget_gb: NonNegInt
    ngc_api_key_file: str | None
    ngc_registry: str
    image_fallback: bool
    serves: str | None
    fleet_address: str | None
    gateway_port: Annotated[int, Field(ge=1, le=65535)]
    gateway_bind: str
    gateway_metrics_port: Annotated[int, Field(ge=1, le=65535)]
    gateway_health_path: str
    gateway_api_keys_file: str | None
    gateway_tls_cert_file: str | None
    gateway_tls_key_file: str | None
    gateway_timeout_sec: Annotated[int, Field(ge=1, le=86400)]
    gateway_queue_timeout_sec: Annotated[int, Field(ge=1, le=86400)]
    gateway_check_inter_ms: Annotated[int, Field(ge=100, le=60000)]
    gateway_check_fall: Annotated[int, Field(ge=1, le=100)]
    gateway_check_rise: Annotated[int, Field(ge=1, le=100)]
    gateway_server_maxconn: Annotated[int, Field(ge=1, le=100000)]
    gateway_backend_port: Annotated[int, Field(ge=1, le=65535)]
    gateway_agent_port: Annotated[int, Field(ge=1, le=65535)]
    drain_timeout_sec: Annotated[int, Field(ge=1, le=86400)]
    pair_role: Literal["head", "worker"] | None
    pair_link_interfaces: list[str]
    pair_link_subnets: list[str]
    pair_link_addresses: list[str] | None  # after build_fleet: resolved on a pair's hosts (pair_fleet.link_addresses)
    pair_link_min_speed_mbps: NonNegInt
    pair_ssh_port: Annotated[int, Field(ge=1, le=65535)]
    pair_link_confirm_sec: Annotated[int, Field(ge=10, le=600)]
    fetch_workers: Annotated[int, Field(ge=1, le=64)]
    hub_client_requirement: str
    pip_index_url: str | None
    tiktoken_base_url: str
    tiktoken_sha256: dict[str, str]
    data_dir: str
    secrets_dir: str
    operator_users: list[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_\-]*\$?$", max_length=32)]]
    disk_headroom_gb: NonNegInt
    image_size_gb: NonNegInt
    memory_reserve_gb: Annotated[float, Field(ge=0, le=4096, allow_inf_nan=False)]
    memory_overhead_fraction: Annotated[float, Field(ge=0, le=10, allow_inf_nan=False)]
    earlyoom_available_gb: Annotated[float, Field(ge=0, le=4096, allow_inf_nan=False)] | None
    service_name: str | None  # the var: serving_unit and unit_base derive the names from it
    restart_sec: PosInt
    start_limit_burst: PosInt
    start_limit_interval_sec: PosInt
    stop_timeout_sec: PosInt
    health_timeout_sec: PosInt
    health_interval_sec: PosInt
    smoke_timeout_sec: PosInt
    keep_releases: Annotated[int, Field(ge=2, le=100)]
    rollback_to: Annotated[str, Field(pattern=f"^{RELEASE_ID}$")] | None
    purge_models: bool

    # Derived from the above: the merged TRT-LLM options (profile deep-merged with the var).
    llm_api_options: dict[str, Any]
    trtllm_version: str = DEFAULT_VERSION  # the contract the options were validated against (the image tag's version)
    vllm_version: str | None = None  # the vLLM vllm_image carries, whose contract vllm_options were checked against
    hf_token: SecretStr | None = Field(default=None, repr=False)
    ngc_api_key: SecretStr | None = Field(default=None, repr=False)  # a hub_mirror host's, read from ngc_api_key_file
    gateways: list[str] = Field(default_factory=list)  # a Spark behind gateways: their addresses (the gateway group)
    model_peers: list[str] = Field(default_factory=list)  # a Spark behind gateways: every Spark of its model
    # a gateway: Spark -> [the model it serves, host:port of its filtering socket, its agent port]
    gateway_backends: dict[str, list[Any]] = Field(default_factory=dict)
    pair: str | None = None  # a host of a two-Spark pair: its pair_* group (pair_fleet)
    pair_peer: str | None = None  # and the pair's other host
    pair_peer_link_addresses: list[str] = Field(default_factory=list)  # the other host's addresses on the link
    image_registry: str | None = None  # image_mirror on: the mirror's registry, address:port (mirror.rules)
    image_clients: list[str] = Field(default_factory=list)  # the mirror host: the Sparks its registry admits

    @field_validator(*FIELD_GRAMMARS)
    @classmethod
    def _v_grammar(cls, v: Any, info: ValidationInfo) -> Any:
        return FIELD_GRAMMARS[cast(str, info.field_name)](v)  # a field validator's info names its field

    @field_validator("container_env")
    @classmethod
    def _v_env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{show(key)} is not a valid environment variable name "
                                 "(allowed: letters, digits and '_', not starting with a digit)")
            if key.upper() in SECRET_ENV:
                raise ValueError(f"'{key}' is a secret; the serving container runs offline and must not get a token")
            bad = grammars.control_chars(value)
            if bad:
                raise ValueError(f"value {show(value)} of {key} has control characters {bad!r} (allowed: any text "
                                 "without newline, carriage return, tab, NUL or other control characters)")
        return v

    @field_validator("tiktoken_sha256")
    @classmethod
    def _v_tiktoken(cls, v: dict[str, str]) -> dict[str, str]:
        if set(v) != set(TIKTOKEN_FILES):
            raise ValueError(f"must map exactly {', '.join(TIKTOKEN_FILES)} to their SHA-256")
        for name, digest in v.items():
            if not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"'{name}': '{digest}' is not a lowercase hex SHA-256 (64 characters)")
        return v

    @field_validator("earlyoom_available_gb")
    @classmethod
    def _v_earlyoom(cls, v: float | None, info: ValidationInfo) -> float | None:
        reserve = info.data.get("memory_reserve_gb")
        if v and reserve is not None and v >= reserve:
            raise ValueError(f"{v:g} GB is not below memory_reserve_gb ({reserve:g} GB), which earlyoom acts in "
                             "(allowed: 0, which leaves earlyoom alone, or a figure below memory_reserve_gb)")
        return v

    @field_validator("serves")
    @classmethod
    def _v_serves(cls, v: str | None) -> str | None:
        if v is not None and v not in (known := profiles()):
            raise ValueError(f"{show(v)} is not a profile (allowed: {', '.join(known)})")
        return v

    @field_validator("operator_users")
    @classmethod
    def _v_users(cls, v: list[str]) -> list[str]:
        if "root" in v:
            raise ValueError("root needs no docker group; list the operators' own accounts")
        return v

    # ---- derived values the deploys use ------------------------------------------------------
    @property
    def controller_endpoint(self) -> str:
        return self.controller_hub_endpoint or self.hub_endpoint

    @property
    def engine(self) -> Engine:
        """The engine the profile runs on (`image` holds that engine's image var)."""
        return engine_of(self.profile)

    @property
    def serving_unit(self) -> str:
        """The serving unit's and its container's name: service_name, else the engine's own (specfleet-trtllm,
        specfleet-vllm), so that `systemctl status`, `journalctl -u` and `docker ps` name the engine that serves."""
        return self.service_name or self.engine.unit

    @property
    def unit_base(self) -> str:
        """The base name of a Spark's gateway-facing units (-gateway.socket, -agent.service, ...): service_name, else
        the default engine's unit name, whatever this host's engine, so that they stay up while the host switches
        engines behind its gateways."""
        return self.service_name or DEFAULT_ENGINE.unit

    @property
    def vllm_contract(self) -> VllmContract:
        """The contract of the vLLM this host's vllm_image carries (kept from validation: a pinned image names no
        tag)."""
        assert self.vllm_version is not None, self.host
        return VLLM_CONTRACTS[self.vllm_version]

    @property
    def llm_schema(self) -> Schema:
        """The TensorRT-LLM contract of this host's image (kept from validation: a pinned image names no tag)."""
        return SCHEMAS[self.trtllm_version]

    @property
    def draft_container_dir(self) -> str | None:
        """Where the draft is mounted in the container: the draft key under any spelling the version accepts."""
        draft = self.profile and self.profile.get("draft")
        return self.engine.draft_dir(self) if draft else None


def build_settings(host: str, deploy_vars: dict[str, Any], profile_name: str | None,
                   defaults: dict[str, Any] | None = None,
                   mirror: bool = False) -> tuple[Settings | None, list[Problem]]:
    """The settings of one host from its deploy vars (the fleet model's, connection vars split off).
    `mirror`: a hub_mirror host in a deploy run: it needs the token like a host of a profile run (its warm-up
    reads gated repos with it), so it is read and required (hf_token_required) also without a profile."""
    defaults = load_defaults() if defaults is None else defaults
    problems = [Problem(host, key, unknown_variable(key, defaults)) for key in deploy_vars if key not in defaults]
    known = profiles()
    if profile_name is not None and profile_name not in known:
        problems.append(Problem(host, "profile", f"unknown profile '{profile_name}' (allowed: {', '.join(known)})"))
        return None, problems

    profile = known.get(profile_name) if profile_name else None
    values = {**defaults, **profile_vars(profile, engine_of(profile).image_var),
              **{k: v for k, v in deploy_vars.items() if k in defaults}}
    checked = checked_profile(profile_name, values.get("serves"), known)  # what its engine options are fitted to
    options = trtllm_options(host, values.get("image"), defaults, deploy_vars, profile_name, checked, known,
                             problems)
    if options is None:
        return None, problems
    schema, merged = options
    vllm_contract = _vllm_contract(host, values.get("vllm_image"), problems)
    vllm = vllm_options.merged(host, defaults, deploy_vars, profile, known.get(checked) if checked else None,
                               vllm_contract, known, problems)
    if vllm is None:
        return None, problems
    if profile_name is not None and (old := image_version_problem(host, values.get("image"), profile_name, known)):
        problems.append(old)
    token = secrets.hf_token(host, values, profile is not None or mirror, problems)
    fields = {k: v for k, v in values.items() if k in Settings.model_fields}
    return _validated(host, problems, {
        **fields, "host": host, "profile_name": profile_name, "profile": profile,
        "image": values.get(engine_of(profile).image_var), "vllm_options": vllm,
        "llm_api_options": merged, "trtllm_version": schema.version, "hf_token": SecretStr(token) if token else None,
        "vllm_version": vllm_contract[0].version if vllm_contract else None,
    })


def _vllm_contract(host: str, image: Any, problems: list[Problem]) -> tuple[VllmContract, str] | None:
    """(the contract of the vLLM `vllm_image` carries, the image); None, with its problem, when specfleet cannot tell
    its version or has no contract for it (an image that is no reference at all is the field's own problem)."""
    try:
        grammars.check_image(image)
    except (ValueError, TypeError):
        return None
    problem = vllm_image_problem(image)
    if problem is not None:
        problems.append(Problem(host, "vllm_image", problem))
        return None
    return vllm_contract_of(image), image


def _validated(host: str, problems: list[Problem], fields: dict[str, Any]) -> tuple[Settings | None, list[Problem]]:
    """The Settings of `fields`, or None and every problem (those found before first)."""
    try:
        settings = Settings.model_validate(fields)
    except ValidationError as exc:
        for err in exc.errors():
            problem = Problem(host, error_key(err["loc"]), error_message(err))
            if problem not in problems:
                problems.append(problem)
        return None, problems
    return (None, problems) if problems else (settings, [])


def build_fleet(fleet: Fleet, profile_name: str | None,
                deploying: bool = False) -> tuple[dict[str, Settings], list[Problem]]:
    """Settings for every host of the fleet, with the current project's overrides (project.project_dir()).
    `deploying`: a deploy run, in which hub_mirror hosts read the token like hosts of a profile run (their warm-up
    reads gated repos)."""
    overrides, problems = load_overrides()
    problems += profile_problems()  # the project's profiles/NAME.yml files: every command refuses a bad one
    if problems:
        return {}, problems
    defaults = {**load_defaults(), **overrides}
    deploy_vars = {**{h: fh.deploy for h, fh in fleet.hosts.items()}, **mirror_fleet.mirror_endpoints(fleet, defaults)}
    mirrors = fleet.mirrors
    profiles = gateway_fleet.host_profiles(fleet, {h: v.get("serves", defaults.get("serves"))
                                                   for h, v in deploy_vars.items()}, profile_name)
    out: dict[str, Settings] = {}
    for host in fleet.hosts:
        settings, host_problems = build_settings(host, deploy_vars[host], profiles[host], defaults,
                                                 mirror=deploying and host in mirrors)
        if settings is not None and host in mirrors and "/" in settings.hub_endpoint.split("://", 1)[1]:
            host_problems.append(Problem(host, "hub_endpoint", f"{show(settings.hub_endpoint)} has a path; the "
                                         "mirror (olah) proxies a whole Hub host "
                                         "(allowed on hub_mirror hosts: http(s)://host[:port])"))
        if settings is not None and host in mirrors and settings.image_mirror:
            key = secrets.ngc_api_key(host, dict(settings), True, host_problems)
            settings = settings.model_copy(update={"ngc_api_key": SecretStr(key) if key else None})
        problems += host_problems
        if settings is not None and not host_problems:
            out[host] = settings
    if problems:
        return out, problems
    # the rules between hosts (each host valid on its own): a fleet without gateway or pair groups gets none
    values = {h: dict(s) for h, s in out.items()}
    problems += (gateway_fleet.problems(fleet, values) + pair_fleet.problems(fleet, values)
                 + mirror_fleet.image_problems(fleet, values))
    if problems:
        return out, problems
    pairs = pair_fleet.pairs(fleet, values)
    gw = gateway_fleet.gateway_fleet(fleet, values, frozenset(p.worker for p in pairs))
    if gw:
        for h in gw.serves:
            model = gw.gateway_vars["gateway_backends"][h][0]
            peers = [x for x, (m, *_) in gw.gateway_vars["gateway_backends"].items() if m == model]
            out[h] = out[h].model_copy(update={**gw.spark_vars, "model_peers": peers})
        out.update({h: out[h].model_copy(update=gw.gateway_vars) for h in gw.gateways})
    for h, update in [*pair_fleet.pair_vars(pairs, values).items(),
                      *mirror_fleet.image_registry_vars(fleet, values).items()]:
        out[h] = out[h].model_copy(update=update)
    return out, problems
