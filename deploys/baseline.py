"""Converge every host of the inventory into a trtllm-serve server for the baseline profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "baseline"

converge(PROFILE)
