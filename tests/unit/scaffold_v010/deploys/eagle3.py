"""Converge every host of the inventory into a trtllm-serve server for the eagle3 profile (see specfleet/profiles.py)."""

from specfleet.steps import converge

PROFILE = "eagle3"

converge(PROFILE)
