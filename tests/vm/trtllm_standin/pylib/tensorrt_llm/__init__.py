"""STAND-IN `tensorrt_llm` package -- this is NOT TensorRT-LLM.

Shipped inside the trtllm-serve stand-in image (tests/vm/trtllm_standin/image.py puts it under
/usr/lib/python3/dist-packages) so that specfleet's in-image config validation
(specfleet/serving/validate.py) has the entry point it uses on a real image:
`from tensorrt_llm.llmapi.llm_args import TorchLlmArgs, update_llm_args_with_extra_dict`.
It holds nothing else: no model code, no server, no CUDA.
"""

__version__ = "0.0.0+standin"
