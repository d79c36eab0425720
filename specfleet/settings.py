"""One validated settings object per host. Precedence, lowest first: the packaged defaults (specfleet/defaults.py)
< the project's group_data/all.py overrides < the deploy's profile < inventory vars.

Validation happens here, on the controller, before any host is contacted. Every problem becomes one
line `HOST: KEY: what is wrong (what is allowed)`; nothing here raises a traceback for user input.
"""

from __future__ import annotations

import ast
import difflib
import importlib.resources
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from .inventory import Inventory
from .llm_options import ALL_DECODING_TYPES, DEFAULT_VERSION, SCHEMAS, Schema, allowed_keys, check_path, deep_merge, schema_for_image, show
from .profiles import PROFILES
from .project import OVERRIDES_FILE, project_dir

# Package data (read with importlib.resources, so an installed wheel needs no source tree).
DEFAULTS_FILE = importlib.resources.files("specfleet").joinpath("defaults.py")

# Inventory vars that configure the connection, not the deploy: passed to pyinfra untouched.
ANSIBLE_CONNECTION_ALIASES = {
    "ansible_host": "ssh_hostname",
    "ansible_port": "ssh_port",
    "ansible_user": "ssh_user",
    "ansible_ssh_private_key_file": "ssh_key",
}
# pyinfra global arguments that make sense as host data (privilege escalation for non-root SSH users).
PYINFRA_HOST_ARGS = {"_sudo", "_sudo_user", "_use_sudo_password", "_use_sudo_login", "_preserve_sudo_env", "_su_user"}
SECRET_ENV = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"}
TIKTOKEN_FILES = ("o200k_base.tiktoken", "cl100k_base.tiktoken")

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]


def load_defaults(path=DEFAULTS_FILE) -> dict[str, Any]:
    """Module-level assignments of the packaged defaults file (fresh objects on every call)."""
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return {k: v for k, v in namespace.items() if not k.startswith("_")}


def load_overrides(project: Path | None = None) -> tuple[dict[str, Any], list["Problem"]]:
    """The project's group_data/all.py: the user's overrides of the packaged defaults, checked by name.

    Read as pyinfra reads group data (module-level names; imports, functions and `__names` are not
    data). Unknown names are refused with a suggestion; connection vars (ssh_*, _sudo, ...) are refused
    too (they belong in the fleet file, where specfleet and testinfra see them); other `_names` are
    private helpers. Values are validated per host with everything else.
    """
    path = (project or project_dir()) / OVERRIDES_FILE
    if not path.is_file():
        return {}, []
    where = str(path)
    namespace: dict[str, Any] = {"__file__": where}
    try:
        exec(compile(path.read_text(encoding="utf-8"), where, "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - a user file: report it in one line
        return {}, [Problem(where, "file", f"cannot be loaded: {type(exc).__name__}: {exc}")]
    defaults = load_defaults()
    out: dict[str, Any] = {}
    problems: list[Problem] = []
    for key, value in namespace.items():
        if key.startswith("__") or isinstance(value, (ModuleType, FunctionType, type)):
            continue
        if key.startswith("ssh_") or key in PYINFRA_HOST_ARGS or key in ANSIBLE_CONNECTION_ALIASES:
            problems.append(Problem(where, key, "connection vars belong in the fleet file (all: vars:), "
                                                "not in group_data/all.py"))
        elif key.startswith("_"):
            continue
        elif key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (`specfleet vars` lists the variables)"
            problems.append(Problem(where, key, f"unknown variable{hint}"))
        else:
            out[key] = value
    return out, problems


def default_comments(path=DEFAULTS_FILE) -> dict[str, str]:
    """The one-line comment documenting each default (used by the README-sync test and `specfleet vars`)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            line = lines[node.end_lineno - 1]
            _, sep, comment = line.rpartition("  # ")
            comments[node.targets[0].id] = comment.strip() if sep else ""
    return comments


# ---- what each kind of string may be -----------------------------------------------------------
# Every inventory string reaches a shell, a systemd unit, a path or a URL on some host. Each is validated
# here by what it is; the use sites quote it for where it goes as well (shlex.quote, render.systemd_word).

URL_RULE = ("allowed: http:// or https://, a host name or IP address, an optional :port (1-65535), a path of "
            "letters, digits, '-', '.', '_', '~', '/' and %XX escapes; no user:password@, no ?query, no #fragment")
_URL_CHARS = re.compile(r"[A-Za-z0-9._~%/:\[\]@?#=&-]*")  # what may appear at all (the last ones to say why not)
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"{_HOST_LABEL}(?:\.{_HOST_LABEL})*")
_URL_PATH = re.compile(r"(?:/(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2})*)*")


def _url_problem(value: str) -> str | None:
    if len(value) > 2000:
        return "is longer than 2000 characters"
    if not _URL_CHARS.fullmatch(value):
        bad = "".join(sorted({c for c in value if not _URL_CHARS.fullmatch(c)}))
        return f"has characters that are not allowed: {bad!r}"
    scheme, sep, rest = value.partition("://")
    if not sep or scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        return "has user info (user:password@); credentials must not live in URLs"
    if "?" in value or "#" in value:
        return "has a query (?) or a fragment (#)"
    if authority.startswith("["):
        host, bracket, port = authority[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return f"has a malformed IPv6 address {authority!r}"
        port = port[1:] if port else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"has a malformed IPv6 address {authority!r}"
    else:
        host, colon, port = authority.partition(":")
        port = port if colon else None
        if re.fullmatch(r"[0-9.]+", host):
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                return f"has a malformed IPv4 address {host!r}"
        elif not _HOSTNAME.fullmatch(host) or len(host) > 253:
            return f"has no valid host name ({host!r})"
    if port is not None and not (re.fullmatch(r"[0-9]{1,5}", port) and 1 <= int(port) <= 65535):
        return f"has a port {port!r} that is not a number from 1 to 65535"
    if not _URL_PATH.fullmatch(slash + path):
        return "has a path with characters that are not allowed (or a '%' not followed by two hex digits)"
    return None


def _url(value: str | None) -> str | None:
    if value is None:
        return None
    problem = _url_problem(value)
    if problem:
        raise ValueError(f"{show(value)} {problem} ({URL_RULE})")
    return value.rstrip("/")


def _abs_dir(value: str) -> str:
    check_path(value)
    return value.rstrip("/")


IMAGE_RULE = ("allowed: a container image reference [registry[:port]/]name[:tag][@sha256:digest], name parts of "
              "lowercase letters, digits, '.', '_', '-' starting with a letter or digit, at most 255 characters")
_IMG_ALNUM = r"[a-z0-9]+"
_IMG_COMPONENT = rf"{_IMG_ALNUM}(?:(?:[._]|__|-+){_IMG_ALNUM})*"
_IMG_DOMAIN_PART = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_IMG_DOMAIN = rf"{_IMG_DOMAIN_PART}(?:\.{_IMG_DOMAIN_PART})*(?::[0-9]+)?"
_IMG_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_IMG_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
# The reference grammar of distribution/reference (what `docker pull` accepts), ASCII only.
_IMAGE = re.compile(rf"(?:{_IMG_DOMAIN}/)?{_IMG_COMPONENT}(?:/{_IMG_COMPONENT})*(?::{_IMG_TAG})?(?:@{_IMG_DIGEST})?")

SERVICE_RULE = ("allowed: a systemd unit / docker container name without the .service suffix: letters, digits, "
                "'_', '.', '-', starting with a letter or digit, 2-64 characters")
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{1,63}")

REVISION_RULE = ("allowed: a branch, tag or commit: letters, digits, '.', '_', '-', '/', not starting with '-', '.' "
                 "or '/', no '..', '//' or '/.', not ending with '/', '.' or '.lock', at most 255 characters")
_REVISION = re.compile(r"[A-Za-z0-9._/-]{1,255}")

REQUIREMENT_RULE = ("allowed: huggingface_hub[extras] with one version specifier (==, ~=, >=, <=, !=, >, <) and a "
                    "version of letters, digits and '.', e.g. huggingface_hub==2.4.0")
_REQUIREMENT = re.compile(r"huggingface_hub(?:\[[A-Za-z0-9_-]+(?:,[A-Za-z0-9_-]+)*\])? ?(?:==|~=|>=|<=|!=|>|<) ?[A-Za-z0-9.]+")

MIRROR_REQUIREMENT_RULE = "allowed: olah with one version specifier and a version of letters, digits and '.', e.g. olah==0.5.4"
_MIRROR_REQUIREMENT = re.compile(r"olah ?(?:==|~=|>=|<=|!=|>|<) ?[A-Za-z0-9.]+")
_REQUIREMENTS = {"hub_client_requirement": (_REQUIREMENT, "a huggingface_hub", REQUIREMENT_RULE),
                 "mirror_requirement": (_MIRROR_REQUIREMENT, "an olah", MIRROR_REQUIREMENT_RULE)}
_PYTHON = re.compile(r"(?:/[A-Za-z0-9._-]+)+|python3(?:\.[0-9]{1,2})?")


def _address_problem(value: str) -> str | None:
    """A host name or IP address the fleet hosts can put in a URL (mirror_address)."""
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME.fullmatch(value):
        return f"{show(value)} is not a host name or IP address (allowed: letters, digits, '-' and '.', or an IPv4/IPv6 address)"
    return None


# Rules of the fields still checked by a pydantic `pattern`, for the message (by top-level field name).
PATTERN_RULES = {
    "operator_users": "allowed: an existing user name: lowercase letters, digits, '_', '-', starting with a letter "
                      "or '_', at most 32 characters",
    "rollback_to": "allowed: a release id r-<12 hex digits> as `specfleet releases` lists them, or null for the previous",
}


def _control_chars(value: str) -> str:
    return "".join(sorted({c for c in value if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u2028\u2029"}))


def _token_file_problem(value: Any) -> str | None:
    if isinstance(value, str) and _control_chars(value):
        return (f"{show(value)} has control characters {_control_chars(value)!r} "
                "(allowed: a path on the controller without newline, tab, NUL or other control characters)")
    return None


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
    service_name: str
    restart_sec: PosInt
    start_limit_burst: PosInt
    start_limit_interval_sec: PosInt
    stop_timeout_sec: PosInt
    health_timeout_sec: PosInt
    health_interval_sec: PosInt
    smoke_timeout_sec: PosInt
    keep_releases: Annotated[int, Field(ge=2, le=100)]
    rollback_to: Annotated[str, Field(pattern=r"^r-[0-9a-f]{12}$")] | None
    purge_models: bool

    # Derived from the above: the merged TRT-LLM options (profile deep-merged with the var).
    llm_api_options: dict[str, Any]
    trtllm_version: str = DEFAULT_VERSION  # the contract the options were validated against (the image tag's version)
    hf_token: SecretStr | None = Field(default=None, repr=False)

    @field_validator("hub_endpoint", "controller_hub_endpoint", "pip_index_url", "tiktoken_base_url")
    @classmethod
    def _v_urls(cls, v: str | None) -> str | None:
        return _url(v)

    @field_validator("mirror_bind")
    @classmethod
    def _v_mirror_bind(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{show(v)} is not an IP address to bind (0.0.0.0 for all interfaces, or one of the host's addresses)") from None
        return v

    @field_validator("mirror_allowed_networks")
    @classmethod
    def _v_mirror_networks(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("is empty, so no host could reach the mirror (allowed: a list of networks in CIDR form, e.g. [\"10.0.0.0/8\"])")
        out = []
        for net in v:
            try:
                out.append(str(ipaddress.ip_network(net, strict=False)))
            except ValueError:
                raise ValueError(f"{show(net)} is not a network in CIDR form (allowed: e.g. 10.0.0.0/8, 192.168.1.20/32, fd00::/8)") from None
        return out

    @field_validator("mirror_address")
    @classmethod
    def _v_mirror_address(cls, v: str | None) -> str | None:
        if v is None:
            return v
        problem = _address_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("mirror_python")
    @classmethod
    def _v_mirror_python(cls, v: str) -> str:
        if not _PYTHON.fullmatch(v) or ".." in v:
            raise ValueError(f"{show(v)} is not an interpreter name or absolute path (allowed: e.g. python3, python3.12, "
                             "/usr/bin/python3: letters, digits, '.', '_', '-', '/')")
        return v

    @field_validator("data_dir", "secrets_dir", "mirror_cache_dir")
    @classmethod
    def _v_dirs(cls, v: str) -> str:
        return _abs_dir(v)

    @field_validator("image")
    @classmethod
    def _v_image(cls, v: str) -> str:
        if v.startswith("-"):
            raise ValueError(f"{show(v)} would be read as a docker option ({IMAGE_RULE})")
        if len(v) > 512 or not _IMAGE.fullmatch(v):
            raise ValueError(f"{show(v)} is not a container image reference ({IMAGE_RULE})")
        return v

    @field_validator("service_name")
    @classmethod
    def _v_service_name(cls, v: str) -> str:
        if v.endswith(".service"):
            raise ValueError(f"{show(v)} ends with .service, which specfleet appends ({SERVICE_RULE})")
        if not _SERVICE.fullmatch(v):
            raise ValueError(f"{show(v)} is not a valid unit / container name ({SERVICE_RULE})")
        return v

    @field_validator("target_revision", "draft_revision")
    @classmethod
    def _v_revision(cls, v: str) -> str:
        if not _REVISION.fullmatch(v):
            bad = "".join(sorted({c for c in v if not _REVISION.fullmatch(c)}))
            raise ValueError(f"{show(v)} " + (f"has characters that are not allowed: {bad!r}" if bad else "is empty or too long")
                             + f" ({REVISION_RULE})")
        if v.startswith(("-", ".", "/")) or ".." in v or "//" in v or "/." in v or v.endswith(("/", ".", ".lock")):
            raise ValueError(f"{show(v)} is not a valid git ref name ({REVISION_RULE})")
        return v

    @field_validator("hub_client_requirement", "mirror_requirement")
    @classmethod
    def _v_requirement(cls, v: str, info) -> str:
        pattern, package, rule = _REQUIREMENTS[info.field_name]
        if not pattern.fullmatch(v):
            raise ValueError(f"{show(v)} is not {package} requirement ({rule})")
        return v

    @field_validator("hf_token_file")
    @classmethod
    def _v_token_file(cls, v: str | None) -> str | None:
        problem = _token_file_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("serve_host")
    @classmethod
    def _v_serve_host(cls, v: str) -> str:
        rule = "(127.0.0.1 for loopback, 0.0.0.0 for all interfaces)"
        if "%" in v:
            raise ValueError(f"{show(v)} has an IPv6 zone (%...); must be an IP address to bind {rule}")
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"must be an IP address to bind {rule}") from None
        return v

    @field_validator("container_env")
    @classmethod
    def _v_env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"{show(key)} is not a valid environment variable name "
                                 "(allowed: letters, digits and '_', not starting with a digit)")
            if key.upper() in SECRET_ENV:
                raise ValueError(f"'{key}' is a secret; the serving container runs offline and must not get a token")
            bad = _control_chars(value)
            if bad:
                raise ValueError(f"value {show(value)} of {key} has control characters {bad!r} "
                                 "(allowed: any text without newline, carriage return, tab, NUL or other control characters)")
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
    def llm_schema(self) -> Schema:
        """The TensorRT-LLM contract of this host's image (kept from validation: a pinned image names no tag)."""
        return SCHEMAS[self.trtllm_version]

    @property
    def draft_container_dir(self) -> str | None:
        """Where the draft is mounted in the container: the draft key under any spelling the version accepts."""
        return self.llm_schema.draft_path(self.llm_api_options) if self.profile and self.profile.get("draft") else None


@dataclass
class Problem:
    host: str
    key: str
    message: str

    def __str__(self) -> str:
        # One line, whatever the input held: control characters (e.g. in a misspelled key) are shown escaped.
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in f"{self.host}: {self.key}: {self.message}")


def read_token(token_file: str | None) -> tuple[str | None, str | None]:
    """(token, problem) read on the controller: hf_token_file if set, else $HF_TOKEN."""
    if token_file:
        try:
            token = Path(token_file).expanduser().read_text(encoding="utf-8").strip()
        except OSError as exc:
            return None, f"cannot read {token_file}: {exc.strerror}"
        return (token or None), (None if token else f"{token_file} is empty")
    token = os.environ.get("HF_TOKEN", "").strip()
    return (token or None), None


def split_vars(host_vars: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate connection data (for pyinfra) from deploy vars (for Settings)."""
    connection: dict[str, Any] = {}
    deploy: dict[str, Any] = {}
    for key, value in host_vars.items():
        if key.startswith("ssh_") or key in PYINFRA_HOST_ARGS:
            connection[key] = value
        elif key in ANSIBLE_CONNECTION_ALIASES:
            connection[ANSIBLE_CONNECTION_ALIASES[key]] = value
        else:
            deploy[key] = value
    return connection, deploy


def build_settings(host: str, host_vars: dict[str, Any], profile_name: str | None,
                   defaults: dict[str, Any] | None = None, mirror: bool = False) -> tuple[Settings | None, list[Problem]]:
    """`mirror`: a hub_mirror host in a deploy run: it needs the token like a host of a profile run (its warm-up
    reads gated repos with it), so it is read and required (hf_token_required) also without a profile."""
    defaults = load_defaults() if defaults is None else defaults
    _, deploy_vars = split_vars(host_vars)
    problems: list[Problem] = []

    for key in deploy_vars:
        if key not in defaults:
            close = difflib.get_close_matches(key, list(defaults), n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (`specfleet vars` lists the variables)"
            problems.append(Problem(host, key, f"unknown variable{hint}"))
    if profile_name is not None and profile_name not in PROFILES:
        problems.append(Problem(host, "profile", f"unknown profile '{profile_name}' (allowed: {', '.join(PROFILES)})"))
        return None, problems

    values = {**defaults, **{k: v for k, v in deploy_vars.items() if k in defaults}}
    profile = PROFILES.get(profile_name) if profile_name else None

    # TRT-LLM options, lowest first: the defaults' (packaged {} + group_data/all.py), the profile's, the inventory's.
    base_extra = defaults.get("extra_llm_api_options", {})
    extra = deploy_vars.get("extra_llm_api_options", {})
    for layer in (base_extra, extra):
        if not isinstance(layer, dict):
            problems.append(Problem(host, "extra_llm_api_options", f"must be a mapping of TRT-LLM options, got {type(layer).__name__}"))
            return None, problems
    # Profiles are written in 1.2.0rc6's names: renamed to the image version's; a user's alias of the draft key is
    # spelled with the version's own name, so the rendered file has one spelling.
    schema = schema_for_image(values.get("image"))
    base_extra, extra = schema.canonical_aliases(base_extra), schema.canonical_aliases(extra)
    merged = deep_merge(deep_merge(base_extra, schema.for_version(profile["llm_api_options"])) if profile else base_extra, extra)
    if profile:
        try:
            schema.options.model_validate(merged)
        except ValidationError as exc:
            for err in exc.errors():
                problems.append(Problem(host, "extra_llm_api_options." + _loc(err["loc"]), _llm_message(err, schema)))
        if not problems and profile.get("draft") and not schema.draft_path(merged):
            problems.append(Problem(host, "extra_llm_api_options.speculative_config",
                                    f"profile {profile_name} serves a draft model: speculative_config with "
                                    f"{schema.contract.draft_field} is required"))
        if not problems and not profile.get("draft") and schema.needs_draft(merged):
            problems.append(Problem(host, "extra_llm_api_options.speculative_config",
                                    f"profile {profile_name} has no draft model; {merged['speculative_config']['decoding_type']} needs one"))

    token = None
    if profile is not None or mirror or values.get("hf_token_required") is True:
        token_file = values.get("hf_token_file") if isinstance(values.get("hf_token_file"), str) else None
        file_problem = _token_file_problem(token_file)
        token, token_problem = (None, file_problem) if file_problem else read_token(token_file)
        if token_problem:
            problems.append(Problem(host, "hf_token_file", token_problem))
        elif token is None and values.get("hf_token_required") is True and (profile is not None or mirror):
            problems.append(Problem(host, "hf_token", "no Hugging Face token: export HF_TOKEN or set hf_token_file "
                                                       "(or hf_token_required: false for public models)"))

    fields = {k: v for k, v in values.items() if k in Settings.model_fields}
    try:
        settings = Settings.model_validate({
            **fields, "host": host, "profile_name": profile_name, "profile": profile,
            "llm_api_options": merged, "trtllm_version": schema.version, "hf_token": SecretStr(token) if token else None,
        })
    except ValidationError as exc:
        for err in exc.errors():
            problem = Problem(host, _loc(err["loc"]), _message(err))
            if problem not in problems:
                problems.append(problem)
        return None, problems
    return (None, problems) if problems else (settings, [])


def build_fleet(inventory: Inventory, profile_name: str | None,
                deploying: bool = False) -> tuple[dict[str, Settings], list[Problem]]:
    """Settings for every host of the current project's inventory (project.project_dir()). `deploying`: a deploy run,
    in which hub_mirror hosts read the token like hosts of a profile run (their warm-up reads gated repos)."""
    overrides, problems = load_overrides()
    if problems:
        return {}, problems
    defaults = {**load_defaults(), **overrides}
    host_vars = {**inventory.host_vars, **mirror_endpoints(inventory, defaults)}
    out: dict[str, Settings] = {}
    for host in inventory.hosts:
        settings, host_problems = build_settings(host, host_vars[host], profile_name, defaults,
                                                 mirror=deploying and host in inventory.groups.get(MIRROR_GROUP, ()))
        if settings is not None and host in inventory.groups.get(MIRROR_GROUP, ()):
            upstream = settings.hub_endpoint.split("://", 1)[1]
            if "/" in upstream:
                host_problems.append(Problem(host, "hub_endpoint", f"{show(settings.hub_endpoint)} has a path; the mirror "
                                             "(olah) proxies a whole Hub host (allowed on hub_mirror hosts: http(s)://host[:port])"))
        problems += host_problems
        if settings is not None and not host_problems:
            out[host] = settings
    return out, problems


MIRROR_GROUP = "hub_mirror"  # inventory group whose hosts run the fleet's Hub mirror (deploys/hub_mirror.py)


def mirror_url(mirror_vars: dict[str, Any], connection: dict[str, Any], name: str) -> str:
    """http://<address>:<port> at which the fleet hosts reach a mirror host (its merged vars and connection data)."""
    address = mirror_vars.get("mirror_address") or connection.get("ssh_hostname") or name
    address = f"[{address}]" if ":" in str(address) else address
    return f"http://{address}:{mirror_vars.get('mirror_port')}"


def mirror_endpoints(inventory: Inventory, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """With a hub_mirror group: the vars of every other host whose hub_endpoint is not set above the `all` level,
    pointed at the (first) mirror; the controller keeps asking the upstream Hub (controller_hub_endpoint).
    Validation of the result happens with everything else (an unusable address is one line)."""
    mirrors = inventory.groups.get(MIRROR_GROUP) or []
    if not mirrors:
        return {}
    connection, mirror_vars = split_vars(inventory.host_vars[mirrors[0]])
    url = mirror_url({**defaults, **mirror_vars}, connection, mirrors[0])
    out: dict[str, dict[str, Any]] = {}
    for host in inventory.hosts:
        if host in mirrors or "hub_endpoint" in inventory.explicit.get(host, ()):
            continue
        own = inventory.host_vars[host]
        upstream = own.get("hub_endpoint", defaults.get("hub_endpoint"))
        out[host] = {**own, "hub_endpoint": url,
                     "controller_hub_endpoint": own.get("controller_hub_endpoint", defaults.get("controller_hub_endpoint")) or upstream}
    return out


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p not in ALL_DECODING_TYPES) or "value"


def _message(err: dict[str, Any]) -> str:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "string_pattern_mismatch":
        rule = PATTERN_RULES.get(str(err["loc"][0])) if err["loc"] else None
        return f"{show(err['input'])} has characters that are not allowed here" + (f" ({rule})" if rule else "")
    if err["type"] == "model_type":  # a config block that is not a mapping (pydantic names the generated class)
        return f"expected a mapping, got {type(err['input']).__name__} {err['input']!r}"
    if err["type"] in ("int_type", "bool_type", "string_type", "float_type", "dict_type", "list_type"):
        return f"{msg.lower()}, got {type(err['input']).__name__} {err['input']!r}"
    return msg[0].lower() + msg[1:] if msg else msg


def _llm_message(err: dict[str, Any], schema: Schema) -> str:
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
    return _message(err)
