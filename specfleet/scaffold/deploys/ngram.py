"""Converge every host of the inventory into a trtllm-serve server for the ngram profile (see specfleet/serving/profiles.py)."""

from specfleet.steps import converge

PROFILE = "ngram"

converge(PROFILE)
