"""Check `vllm serve` arguments with the image's OWN vLLM: run in the image by the release step (engines/check.py),
as `python3 -c <this file> PARSER CHECK ENGINE_ARGS FLEXIBLE -- ARGS...`: the four `module:name` the pinned version
defines (engines/vllm_contract.py, `validator`), then what the unit passes after `vllm serve`.

What `vllm serve` does with its arguments before it loads anything (vLLM 0.20.1, vllm/entrypoints/cli/serve.py): parse
them with the serve parser (vllm/entrypoints/openai/cli_args.py make_arg_parser on a
vllm.utils.argparse_utils.FlexibleArgumentParser), run validate_parsed_serve_args, and build the engine arguments
(vllm/engine/arg_utils.py AsyncEngineArgs.from_cli_args). So a flag the image's vLLM does not have, a value of the wrong
type, a choice it does not list or a speculative config that is not JSON is refused here, before the switch. The
values' own rules (ranges, the speculative method) wait for the engine's config, which reads the models: specfleet
checks those on the controller (engines/vllm_options.py). Runs without network and without HF_HUB_OFFLINE, so nothing
is looked up. Prints one line as its last line: `OK`, or `<ExceptionType>: <message>` and exits 1."""

import importlib
import sys
from typing import Any


def _name(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str]) -> int:
    try:  # the image's vLLM (not on the controller), by the names its version defines
        make_arg_parser, validate_parsed_serve_args, engine_args, flexible = (_name(a) for a in argv[:4])
        assert argv[4] == "--", "usage: PARSER CHECK ENGINE_ARGS FLEXIBLE -- ARGS..."

        class Parser(flexible):  # type: ignore[misc,valid-type]  # the image's class
            def error(self, message: str) -> None:  # argparse would print usage and exit 2: one line instead
                raise ValueError(message)

        args = make_arg_parser(Parser(prog="vllm serve")).parse_args(argv[5:])
        validate_parsed_serve_args(args)
        args.model = args.model_tag
        engine_args.from_cli_args(args)
    except Exception as exc:  # the image's own verdict, whatever it raised
        print(f"{type(exc).__name__}: " + " ".join(str(exc).split()))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
