"""Converge every host of the inventory into a trtllm-serve server for the eagle3 profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "eagle3"

converge(PROFILE)
