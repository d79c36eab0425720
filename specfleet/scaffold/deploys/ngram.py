"""Converge every host of the inventory into a trtllm-serve server for the ngram profile (`specfleet profiles` shows it)."""

from specfleet.steps import converge

PROFILE = "ngram"

converge(PROFILE)
