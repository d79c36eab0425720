"""STAND-IN `python3 -m tensorrt_llm.llmapi.mgmn_leader_node [--action stop]` -- this is NOT TensorRT-LLM.

Rank 0 under trtllm-llmapi-launch: holds the MPI world and serves the trtllm-serve process started beside it
(tensorrt_llm/llmapi/mpi_session.py here). `--action stop` (sent by the launcher when trtllm-serve ends) stops it and
the worker ranks."""

import argparse
import os
import sys

from tensorrt_llm.llmapi import mpi_session


def log(msg):
    print(f"mgmn_leader_node STAND-IN: {msg}", file=sys.stderr, flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="mgmn_leader_node")
    ap.add_argument("--action", choices=("start", "stop"), default="start")
    if ap.parse_args(argv).action == "stop":
        mpi_session.stop()
        return 0
    log(f"joining the MPI world of {os.environ.get('tllm_mpi_size', '?')} ranks")  # noqa: SIM112 -- upstream's name
    from mpi4py import MPI  # Debian's python3-mpi4py, in the pair variant; MPI_Init waits for every rank

    mpi_session.RemoteMpiCommSessionServer(MPI.COMM_WORLD, log).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
