"""What the serving container runs, per engine, from one host's validated settings (pure).

- TensorRT-LLM: `trtllm-serve MODEL --host --port <profile's flags> <version's config flag> CONTAINER_CONFIG`; on a
  pair's head the MPI launch of it over both nodes (pair/launch.py), on a pair's worker a process that holds the
  container up for the head's launch.
- vLLM: `vllm serve MODEL --served-model-name MODEL --host --port <vllm_options as argv>
  --gpu-memory-utilization=<vllm_gpu_memory_utilization>` (with HF_HUB_OFFLINE vLLM replaces MODEL by its snapshot
  path, which would otherwise become the served name: vllm/engine/arg_utils.py:713-731 at v0.20.1). The options are
  validated first (engines/vllm_options.py) and rendered one argument per value, never as a free string.
"""

from __future__ import annotations

from collections.abc import Callable

import yaml

from ..fleet.settings import Settings
from ..host.layout import CONTAINER_CONFIG
from ..pair.launch import mpirun_argv
from . import vllm_options
from .catalog import memory_fraction


def serve_args(s: Settings) -> list[str]:
    """trtllm-serve's arguments (also what the pair's MPI launch runs on each rank)."""
    assert s.profile is not None
    return [s.profile["target"]["repo"], "--host", s.serve_host, "--port", str(s.serve_port),
            *s.profile["serve_flags"], s.llm_schema.contract.serve_flag, CONTAINER_CONFIG]


def _trtllm(s: Settings) -> list[str]:
    if s.pair_role == "worker":
        return ["sleep", "infinity"]
    if s.pair_role == "head":
        return mpirun_argv(s, serve_args(s))
    return ["trtllm-serve", *serve_args(s)]


def _vllm(s: Settings) -> list[str]:
    assert s.profile is not None
    model = s.profile["target"]["repo"]
    return ["vllm", "serve", model, "--served-model-name", model, "--host", s.serve_host, "--port", str(s.serve_port),
            *vllm_options.argv(s.vllm_options)]


_COMMANDS: dict[str, Callable[[Settings], list[str]]] = {"trtllm": _trtllm, "vllm": _vllm}


def container_command(s: Settings) -> list[str]:
    """The serving container's command for the host's engine (without memory_flag)."""
    return _COMMANDS[s.engine.name](s)


def memory_flag(s: Settings) -> str:
    """The engine's memory share flag as the unit's ExecStart ends with it, `--gpu-memory-utilization=0.8`: the
    share is a setting, shown by `render` and `plan` (memory/rules.py checks it against the host's MemTotal);
    "" for an engine that sizes from what is free."""
    share = memory_fraction(s)
    return f"{s.engine.memory_fraction_flag}={share:g}" if share is not None else ""


def _trtllm_options(s: Settings) -> str:
    """extra-llm-api-config.yml: the profile's TRT-LLM options deep-merged with extra_llm_api_options (trtllm-serve
    reads it, mounted at CONTAINER_CONFIG)."""
    return yaml.safe_dump(s.llm_api_options, sort_keys=False, default_flow_style=False)


VLLM_OPTIONS_HEADER = ("# vLLM's options for this release, as validated (vllm_options over the profile's).\n"
                       "# vLLM does not read this file: the unit's ExecStart passes them as arguments.\n")


def _vllm_options(s: Settings) -> str:
    """The record of the options the argv was rendered from (so `plan`, `releases` and the release id see a change of
    options as one, as for TensorRT-LLM); not mounted."""
    return VLLM_OPTIONS_HEADER + yaml.safe_dump(s.vllm_options, sort_keys=False, default_flow_style=False)


_OPTIONS: dict[str, Callable[[Settings], str]] = {"trtllm": _trtllm_options, "vllm": _vllm_options}


def options_file(s: Settings) -> str:
    """The release's options file (host/layout.py CONFIG_FILE) for the host's engine."""
    return _OPTIONS[s.engine.name](s)
