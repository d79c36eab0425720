"""STAND-IN vllm.entrypoints.openai.cli_args: `vllm serve`'s parser from the stand-in script (installed as
/usr/local/bin/vllm in the image; VLLM_STANDIN_SCRIPT names it elsewhere)."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os

_PATH = os.environ.get("VLLM_STANDIN_SCRIPT", "/usr/local/bin/vllm")
_loader = importlib.machinery.SourceFileLoader("vllm_standin_serve", _PATH)
_spec = importlib.util.spec_from_loader(_loader.name, _loader)
assert _spec is not None
_standin = importlib.util.module_from_spec(_spec)
_loader.exec_module(_standin)


def make_arg_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    return _standin.add_serve_args(parser)


def validate_parsed_serve_args(args: argparse.Namespace) -> None:
    """vLLM's quick checks (chat template, tool parser, log outputs): none of them is set by specfleet."""
