"""Converge every host of the inventory into a trtllm-serve server for the eagle3 profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "eagle3"

converge(PROFILE)
