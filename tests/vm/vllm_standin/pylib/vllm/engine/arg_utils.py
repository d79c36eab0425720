"""STAND-IN vllm.engine.arg_utils: AsyncEngineArgs.from_cli_args keeps the parsed arguments (vLLM 0.20.1's builds
its dataclass from them, arg_utils.py:1452; its checks of the values wait for the engine's config)."""

from __future__ import annotations

import argparse


class AsyncEngineArgs:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> AsyncEngineArgs:
        return cls(**vars(args))
