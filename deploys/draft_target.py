"""Converge every host of the inventory into a trtllm-serve server for the draft_target profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "draft_target"

converge(PROFILE)
