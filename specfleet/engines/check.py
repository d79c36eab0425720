"""The release step's check of a release's options with the image's OWN engine, per engine (pure): the shell command
a host runs (serving/validate.py verdict_command: a cached verdict per (options, image id), else a short container of
the image, `--network none`).

- TensorRT-LLM: the image's argument classes on the mounted extra-llm-api-config.yml (serving/validate.py).
- vLLM: the image's `vllm serve` parser and engine arguments on the unit's own arguments
  (engines/host/validate_vllm_args.py); the verdict is keyed on the release's options record.
"""

from __future__ import annotations

from collections.abc import Callable

from ..fleet.programs import program_text
from ..fleet.settings import Settings
from ..serving.validate import host_command, verdict_command
from .command import container_command

VLLM_SCRIPT = program_text("validate_vllm_args.py")


def _trtllm(s: Settings, host_name: str, config_path: str, config: str) -> str:
    return host_command(host_name, s.data_dir, config_path, config, s.image, s.gpus, s.llm_schema.contract)


def _vllm(s: Settings, host_name: str, config_path: str, config: str) -> str:
    argv = container_command(s)[2:]  # after `vllm serve`
    return verdict_command(s.data_dir, config, s.image, s.gpus,
                           [s.image, "-c", VLLM_SCRIPT, *s.vllm_contract.validator, "--", *argv],
                           f"{host_name}: vllm_options: refused by {s.image}'s own vLLM: ")


_CHECKS: dict[str, tuple[str, Callable[[Settings, str, str, str], str]]] = {
    "trtllm": ("extra-llm-api-config.yml", _trtllm), "vllm": ("vllm serve arguments", _vllm)}


def in_image_check(s: Settings, host_name: str, config_path: str, config: str) -> tuple[str, str]:
    """(what is checked, the host's command) for the host's engine."""
    what, command = _CHECKS[s.engine.name]
    return what, command(s, host_name, config_path, config)
