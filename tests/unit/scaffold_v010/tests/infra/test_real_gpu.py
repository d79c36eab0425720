"""Real-GPU tier (marked real_gpu; skipped unless gpus: true): specfleet/testinfra/real_gpu.py."""

from specfleet.testinfra.real_gpu import *  # noqa: F401,F403
