"""specfleet: declarative trtllm-serve speculative-decoding deploys for DGX Spark fleets, on pyinfra."""

__version__ = "0.3.0"
