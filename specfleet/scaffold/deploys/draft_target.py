"""Converge every host of the inventory into a trtllm-serve server for the draft_target profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "draft_target"

converge(PROFILE)
