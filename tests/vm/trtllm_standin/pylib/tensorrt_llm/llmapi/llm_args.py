"""STAND-IN `tensorrt_llm.llmapi.llm_args` -- this is NOT TensorRT-LLM.

Exposes the two names specfleet's in-image validation script uses (specfleet/serving/validate.py),
backed by the trtllm-serve stand-in's OWN validator (`validate_extra_options` in the stand-in script, the
same check the stand-in server runs on its YAML at start), which reads the contract extracted from upstream
for the stand-in's version (tests/contract/trtllm_llm_args.json), never specfleet's schema:

* `update_llm_args_with_extra_dict(llm_args, llm_args_dict, extra_llm_api_options=None)`: the YAML dict
  merged over trtllm-serve's args (`llm_args | llm_args_dict`, as the real helper returns); the real one
  also converts sub-config blocks, the stand-in checks everything in `TorchLlmArgs`;
* `TorchLlmArgs(**kwargs)`: refuses (ValueError, like pydantic's ValidationError, a ValueError) any args the
  stand-in server would refuse, with the stand-in's error text; `model` is required and not validated.

The stand-in script is loaded from $TRTLLM_STANDIN_SERVE, else /usr/local/bin/trtllm-serve (the image),
else ../../../trtllm_serve.py next to this package in the specfleet source tree (tests).
"""

import importlib.util
import os
from importlib.machinery import SourceFileLoader

_HERE = os.path.dirname(os.path.abspath(__file__))
_CANDIDATES = (os.environ.get("TRTLLM_STANDIN_SERVE", ""), "/usr/local/bin/trtllm-serve",
               os.path.join(_HERE, "..", "..", "..", "trtllm_serve.py"))


def _standin():
    """The STAND-IN trtllm-serve script, imported as a module (its main() does not run)."""
    for path in _CANDIDATES:
        if path and os.path.isfile(path):
            loader = SourceFileLoader("_trtllm_standin_serve", path)
            spec = importlib.util.spec_from_loader("_trtllm_standin_serve", loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    raise ImportError("STAND-IN tensorrt_llm: the stand-in trtllm-serve script is not found "
                      f"({', '.join(p for p in _CANDIDATES if p)})")


_serve = _standin()


def update_llm_args_with_extra_dict(llm_args, llm_args_dict, extra_llm_api_options=None):
    """STAND-IN: trtllm-serve's args with the extra_llm_api_options YAML dict merged over them."""
    if not isinstance(llm_args_dict, dict):
        raise ValueError(f"extra_llm_api_options: the YAML must be a mapping, got {_serve._typename(llm_args_dict)}")
    return dict(llm_args) | dict(llm_args_dict)


class TorchLlmArgs:
    """STAND-IN for the PyTorch backend's LLM args: validated by the stand-in's validate_extra_options."""

    def __init__(self, **kwargs):
        if "model" not in kwargs:
            raise ValueError("1 validation error for TorchLlmArgs\nmodel\n  Field required (STAND-IN)")
        self.model = kwargs.pop("model")
        errs = _serve.validate_extra_options(kwargs, "pytorch")
        if errs:
            plural = "" if len(errs) == 1 else "s"
            raise ValueError(f"{len(errs):d} validation error{plural} for TorchLlmArgs (STAND-IN): {'; '.join(errs)}")
        self.args = kwargs
