"""STAND-IN `tensorrt_llm.llmapi` -- this is NOT TensorRT-LLM; only `llm_args` exists (see llm_args.py)."""
