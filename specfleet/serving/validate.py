"""Validate the rendered extra-llm-api-config.yml with the image's OWN TensorRT-LLM argument classes.

specfleet's schema (serving/options.py) refuses bad options on the controller, but it is a copy: the
authority is the TensorRT-LLM inside the image the host will run. So the release step runs, on the host,
a short container of that image (`docker run --rm --network none --entrypoint python3 -v
<release>/extra-llm-api-config.yml:CONTAINER_CONFIG:ro IMAGE -c SCRIPT`, SCRIPT being serving/host/validate_config.py),
which does with the file what `trtllm-serve --extra_llm_api_options` (or `--config`) does in
tensorrt_llm/commands/serve.py (NVIDIA/TensorRT-LLM): `yaml.safe_load` it, merge it into trtllm-serve's llm args with
`update_llm_args_with_extra_dict` (which turns the config blocks into their classes), then build the PyTorch
backend's args, `TorchLlmArgs(**args)`; the module and both names are the version's (serving/contract.py, read
from upstream per version, passed to the script as arguments; what `LLM(**llm_args)` builds for `--backend pytorch`;
its models are strict, `extra="forbid"`). The model is a dummy id (validate_config.MODEL): building the args loads no
weights, and `--network none` keeps anything from downloading. No GPU is used; with `gpus: true` the container gets
`--gpus=all` only so the image's CUDA libraries load as they do in the service.

The script prints one line as its last line: `OK`, or `<ExceptionType>: <message>` (pydantic's multi-line
message folded into one line) and exits 1. TensorRT-LLM may log before that line, so the host side keeps
only the last line. An OK verdict is cached on the host as an empty file
`<data_dir>/validated/<sha256(config)[:16]>-<image id[:12]>` (verdict_name): the status fact lists the
verdicts for the release's config hash, so a converged host runs no container. A refusal fails the host
before anything that serves changes, with the line
`HOST: extra_llm_api_options: refused by IMAGE's own TensorRT-LLM: <error>`.

The trtllm-serve stand-in image (tests/vm/trtllm_standin) ships a STAND-IN `tensorrt_llm` package with the
same two names, backed by its own independent validator.
"""

from __future__ import annotations

import hashlib
import shlex

from ..fleet.programs import program_text
from ..host.layout import Layout
from .host.validate_config import PATH as CONTAINER_CONFIG

# The program that runs in the image (a file of its own: specfleet/serving/host/validate_config.py).
SCRIPT = program_text("validate_config.py")


def script_args(contract) -> list[str]:
    """`python3` arguments that run SCRIPT with the version's import names (trtllm_versions.Contract)."""
    return ["-c", SCRIPT, contract.validator_module, *contract.validator_names]


def config_key(config: str) -> str:
    """The config half of a verdict name: sha256 of the rendered YAML, 16 hex digits."""
    return hashlib.sha256(config.encode()).hexdigest()[:16]


def image_key(image_id: str) -> str:
    """The image half of a verdict name: the image id (`sha256:...`) without its prefix, 12 hex digits."""
    return image_id.removeprefix("sha256:")[:12]


def verdict_name(config: str, image_id: str) -> str:
    return f"{config_key(config)}-{image_key(image_id)}"


def host_command(host_name: str, data_dir: str, config_path: str, config: str, image: str, gpus: bool, contract) -> str:
    """The shell command the release step runs for a TensorRT-LLM release: SCRIPT in the image on the mounted config."""
    return verdict_command(data_dir, config, image, gpus,
                           ["-v", f"{config_path}:{CONTAINER_CONFIG}:ro", image, *script_args(contract)],
                           f"{host_name}: extra_llm_api_options: refused by {image}'s own TensorRT-LLM: ")


def verdict_command(data_dir: str, config: str, image: str, gpus: bool, run: list[str], refused: str) -> str:
    """THE in-image check on a host, for any engine: resolve the image id on the host (it may have been pulled in this
    run), skip when a verdict for (config, image) exists, else run `docker run --rm --pull=never --network none
    [--gpus=all] --entrypoint python3 RUN...`, keep its last line and cache an OK; a refusal is `REFUSED<last line>`
    on stderr."""
    q = shlex.quote
    vdir = Layout(data_dir).validated
    docker = ["docker", "run", "--rm", "--pull=never", "--network", "none"] + (["--gpus=all"] if gpus else []) + \
        ["--entrypoint", "python3", *run]
    return (
        f"id=$(docker image inspect --format '{{{{.Id}}}}' {q(image)}) || exit 1; "
        f"v={q(vdir + '/' + config_key(config))}-$(printf '%s' \"${{id#sha256:}}\" | cut -c1-12); "
        f"[ -e \"$v\" ] && exit 0; "
        f"out=$({' '.join(q(a) for a in docker)} 2>&1); rc=$?; "
        f"line=$(printf '%s\\n' \"$out\" | tail -n 1); "
        f"if [ \"$rc\" = 0 ] && [ \"$line\" = OK ]; then mkdir -p {q(vdir)} && touch \"$v\"; "
        f"else echo {q(refused)}\"${{line:-exit $rc, no output}}\" >&2; exit 1; fi"
    )
