"""Stop and disable trtllm-serve and remove its container; the model cache stays unless purge_models is true."""

from specfleet.steps import cleanup

cleanup()
