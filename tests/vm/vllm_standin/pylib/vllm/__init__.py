"""STAND-IN `vllm` package of the lab's vLLM stand-in image: the three names specfleet's in-image check of `vllm serve`
arguments imports (specfleet/engines/host/validate_vllm_args.py), backed by the stand-in's own parser
(/usr/local/bin/vllm, tests/vm/vllm_standin/vllm_serve.py). Not vLLM."""

__version__ = "0.20.1"
