"""Converge every host of the inventory into a vLLM (`vllm serve`) server for the vllm_eagle3 profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "vllm_eagle3"

converge(PROFILE)
