"""Every file a deploy writes on a host, rendered on the controller from the validated settings.

`specfleet render` prints exactly these (the token redacted); the deploy steps upload exactly these.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from ..constants import GB
from ..engines.command import container_command, memory_flag, options_file
from ..fleet.settings import Settings
from ..fleet.templating import ENV, systemd_args, systemd_word
from ..host.layout import (
    CONTAINER_CONFIG,
    CONTAINER_MEMORY_VAR,
    CONTAINER_TIKTOKEN,
    DOCKER_UNIT,
    DRAFT_LINK,
    PAIR_AGENT,
    PAIR_AGENT_ENV,
    PAIR_MOUNT,
    PAIR_USER,
    SMOKE_FILE,
    Layout,
)
from ..memory.rules import reserve_kb

CONTAINER_HF_HOME = "/root/.cache/huggingface"
REDACTED = "<redacted: the Hugging Face token from HF_TOKEN / hf_token_file>"
# Bumped when specfleet itself renders differently for the same inputs (new release ids, so hosts restart on their
# next converge); recorded in release.json, shown by `plan` as its own reason, each bump in docs/upgrades.md.
RENDERING = 6
# rendering -> the TensorRT-LLM contract versions whose hosts it changed (`plan` names it only for those).
RENDERING_CHANGED = {
    2: ("1.3.0rc12",),  # TensorRT-LLM's contract per version: Draft_Target, Eagle3, speculative_model, --config
    3: ("1.2.0rc6", "1.3.0rc12"),  # unified memory: the page cache dropped before every start, --oom-score-adj
    4: ("1.2.0rc6", "1.3.0rc12"),  # unified memory: the container capped at MemTotal less memory_reserve_gb
    5: ("1.2.0rc6", "1.3.0rc12"),  # a pinned image runs as the local tag name:sha256-<hex> (images through a registry)
    # docker run --pull=never; vLLM: its share from vllm_gpu_memory_utilization, its own unit and options record
    6: ("1.2.0rc6", "1.3.0rc12"),
}
OOM_SCORE_ADJ = 1000  # the serving container is the kernel OOM killer's first choice (the most it can be)


def config_yaml(s: Settings) -> str:
    """The release's options file (engines/command.py `options_file`)."""
    return options_file(s)


def docker_run_args(s: Settings) -> list[str]:
    layout = Layout.of(s)
    # --oom-score-adj: under memory pressure the kernel kills the serving container first (its processes inherit it),
    # never sshd or dockerd; see docs/memory.md
    # --pull=never: the unit runs what the image step put on the host (docker never pulls behind specfleet's back:
    # a tag that is missing fails the start, it is not fetched from a registry the lock did not choose)
    args = ["--rm", "--pull=never", "--name", s.serving_unit, "--init", f"--oom-score-adj={OOM_SCORE_ADJ}"]
    if s.gpus:
        args.append("--gpus=all")
    args += ["--ipc=host", "--network", "host", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": CONTAINER_HF_HOME}
    if s.profile and s.profile["tiktoken"]:
        env["TIKTOKEN_ENCODINGS_BASE"] = CONTAINER_TIKTOKEN
    env.update(s.container_env)
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    args += ["-v", f"{layout.hf_home}:{CONTAINER_HF_HOME}:ro"]
    if s.draft_container_dir:
        args += ["-v", f"{layout.current_file(DRAFT_LINK)}:{s.draft_container_dir.rstrip('/')}:ro"]
    if s.engine.mounts_config:
        args += ["-v", f"{layout.current_file(s.engine.options_file)}:{CONTAINER_CONFIG}:ro"]
    if s.profile and s.profile["tiktoken"]:
        args += ["-v", f"{layout.tiktoken}:{CONTAINER_TIKTOKEN}:ro"]
    if s.pair_role == "worker":  # OpenMPI's orted checks that the rsh agent mpirun forwards exists, even without tree
        # spawn (4.1.4: "plm_rsh_agent was set to a path that could not be found", then it dies): seen on lab guests.
        # The worker's copy of the agent, read-only; without the pair's key (never on the worker) it reaches nothing
        args += ["-v", f"{layout.pair_agent}:{PAIR_AGENT}:ro"]
    if s.pair_role == "head":  # the MPI key, the worker's pinned host key and the rsh agent (pair/host/pair_agent.sh)
        args += ["-v", f"{layout.pair_dir}:{PAIR_MOUNT}:ro"]
        for key, value in zip(PAIR_AGENT_ENV, (PAIR_USER, str(s.pair_ssh_port)), strict=True):
            args += ["-e", f"{key}={value}"]
    return args


def memory_cap_args(s: Settings) -> tuple[list[str], list[str]]:
    """The container's memory cap: drop-caches' arguments (it writes MemTotal less the reserve, in kB, to an env file
    before every start) and docker run's, which read it there. Both --memory and --memory-swap: no swap beyond it.
    systemd expands the ${VAR} (so these are rendered as they are, not by systemd_word, which would escape it)."""
    layout = Layout.of(s)
    reserve = str(reserve_kb(int(s.memory_reserve_gb * GB)))  # bytes as memory.fit counts them, then THE kB
    pre = [layout.drop_caches_tool, layout.mem_at_start, reserve, layout.container_memory, CONTAINER_MEMORY_VAR]
    var = "${" + CONTAINER_MEMORY_VAR + "}"
    return pre, [f"--memory={var}", f"--memory-swap={var}"]


def profile_of(s: Settings) -> dict[str, Any]:
    """The profile of a host that serves a release (the release's files exist only then)."""
    if s.profile is None:
        raise ValueError(f"{s.host}: no profile, so no release to render")
    return s.profile


def unit_text(s: Settings) -> str:
    layout = Layout.of(s)
    pre, cap = memory_cap_args(s)
    model = profile_of(s)["target"]["repo"]
    return ENV.get_template("serving.service.j2").render(
        profile=s.profile_name, model=model, current_dir=layout.current, docker_unit=DOCKER_UNIT,
        container_name=systemd_word(s.serving_unit), image=systemd_word(s.image),
        drop_caches=systemd_args(pre), cap_env=layout.container_memory,
        docker_args=" ".join([*cap, systemd_args(docker_run_args(s))]),
        command=" ".join(filter(None, [systemd_args(container_command(s)), memory_flag(s)])), server=s.engine.server,
        start_limit_interval_sec=s.start_limit_interval_sec, start_limit_burst=s.start_limit_burst,
        restart_sec=s.restart_sec, stop_timeout_sec=s.stop_timeout_sec,
        stop_timeout_sec_plus=s.stop_timeout_sec + 30,
    )


def smoke_request(s: Settings) -> str:
    """The seed's smoke completion for the profile, as the JSON body POSTed to /v1/completions."""
    profile = profile_of(s)
    return json.dumps({"model": profile["target"]["repo"], **profile["smoke"]}, indent=1) + "\n"


def token_file_text(secret: str) -> str:
    """THE token file format: the token and a newline (what `hf` and huggingface_hub read)."""
    return secret + "\n"


def token_text(s: Settings, redact: bool = True) -> str:
    if s.hf_token is None:
        return ""
    return token_file_text(REDACTED if redact else s.hf_token.get_secret_value())


class RenderedRelease(Protocol):
    """What rendered_files takes of a release rendered once per host (plan.Rendered)."""

    @property
    def config(self) -> str: ...
    @property
    def unit(self) -> str: ...
    @property
    def smoke(self) -> str: ...


def rendered_files(s: Settings, redact: bool = True, release: RenderedRelease | None = None) -> dict[str, str]:
    """Host path -> content for every file a converge writes whose content is known before deploying.

    Release files are written under releases/<id>/ and reached through the `current` link. `release`: the
    plan's already rendered release (plan.Rendered), so a host's files are rendered once.
    """
    layout = Layout.of(s)
    files = {}
    if s.profile is not None:
        files = {
            layout.current_file(s.engine.options_file): release.config if release else config_yaml(s),
            layout.current_file(f"{s.serving_unit}.service"): release.unit if release else unit_text(s),
            layout.current_file(SMOKE_FILE): release.smoke if release else smoke_request(s),
        }
    if s.hf_token is not None:
        files[layout.token_file] = token_text(s, redact)
    return files
