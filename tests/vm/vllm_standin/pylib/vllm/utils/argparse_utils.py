"""STAND-IN vllm.utils.argparse_utils: FlexibleArgumentParser is an ArgumentParser (vLLM's adds config-file and
underscore-spelling conveniences that specfleet does not use)."""

import argparse


class FlexibleArgumentParser(argparse.ArgumentParser):
    pass
