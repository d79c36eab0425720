"""Converge every host of the inventory into a vLLM (`vllm serve`) server for the vllm_draft_target profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "vllm_draft_target"

converge(PROFILE)
