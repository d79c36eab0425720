"""Validate a rendered extra-llm-api-config.yml with the image's OWN TensorRT-LLM (run inside the image).

Shipped as `python3 -c <this file's text> MODULE ARGS_CLASS MERGE_FUNCTION` (validate_in_image.host_command):
the version's names from specfleet/trtllm_versions.py. Prints one last line, `OK` or `<ExceptionType>: <message>`
(folded into one line), and exits 1 on a refusal. Runs with the image's python3: the stdlib, plus the image's
own yaml and tensorrt_llm, imported inside main() so that the controller can import PATH without them.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported when it runs
if TYPE_CHECKING:
    from typing import Any

PATH = "/tmp/specfleet-config.yml"  # where host_command mounts the config, read-only
MODEL = "specfleet/validate-only"  # dummy model id: argument validation only, nothing is loaded


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def load_names(argv: list[str]) -> tuple[Any, Any]:
    """The version's argument class and merge function (the merge falls back to llm_utils on older builds)."""
    import importlib

    module = importlib.import_module(argv[1])
    args_class = getattr(module, argv[2])
    try:
        merge = getattr(module, argv[3])
    except AttributeError:  # an image of an unknown version whose serve.py takes it from llm_utils (older builds)
        merge = getattr(importlib.import_module("tensorrt_llm.llmapi.llm_utils"), argv[3])
    return args_class, merge


def one_line(exc: Exception) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines()
                    if line.strip() and not line.strip().startswith("For further information"))
    return " ".join(text.split())


def main(argv: list[str]) -> int:
    try:
        import yaml

        TorchLlmArgs, update_llm_args_with_extra_dict = load_names(argv)  # upstream's names (serve.py)
    except Exception as exc:
        say(f"cannot import TensorRT-LLM's argument classes: {type(exc).__name__}: {' '.join(str(exc).split())}")
        return 1
    try:
        with open(PATH) as fh:
            extra = yaml.safe_load(fh)
        if extra is None:
            extra = {}
        if not isinstance(extra, dict):
            raise ValueError(f"the YAML top level must be a mapping, got {type(extra).__name__}")
        args = update_llm_args_with_extra_dict({"model": MODEL, "backend": "pytorch"}, extra, PATH)
        TorchLlmArgs(**args)
    except Exception as exc:
        say(f"{type(exc).__name__}: {one_line(exc)[:1000]}")
        return 1
    say("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
