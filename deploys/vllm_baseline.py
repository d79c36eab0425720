"""Converge every host of the inventory into a vLLM (`vllm serve`) server for the vllm_baseline profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "vllm_baseline"

converge(PROFILE)
