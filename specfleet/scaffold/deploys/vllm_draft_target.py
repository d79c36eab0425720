"""Converge every host of the inventory into a vLLM (`vllm serve`) server for the vllm_draft_target profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "vllm_draft_target"

converge(PROFILE)
