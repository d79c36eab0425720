"""STAND-IN `python3 -m tensorrt_llm.llmapi.mgmn_worker_node` -- this is NOT TensorRT-LLM.

A rank other than 0 under trtllm-llmapi-launch: reports to rank 0's leader and waits for its stop
(tensorrt_llm/llmapi/mpi_session.py here). It runs no model."""

import sys

from tensorrt_llm.llmapi import mpi_session


def log(msg):
    print(f"mgmn_worker_node STAND-IN: {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    from mpi4py import MPI  # Debian's python3-mpi4py, in the pair variant of the stand-in image

    mpi_session.worker(MPI.COMM_WORLD, log)
