"""Converge every host of the inventory into a vLLM (`vllm serve`) server for the vllm_baseline profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "vllm_baseline"

converge(PROFILE)
