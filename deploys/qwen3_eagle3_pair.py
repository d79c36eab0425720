"""Converge the pairs of the inventory into two-Spark (TP=2) trtllm-serve servers for the qwen3_eagle3_pair profile
(see specfleet/profiles.py). Not yet: specfleet checks and locks a pair, and this deploy refuses to start one."""

from specfleet.steps import converge

PROFILE = "qwen3_eagle3_pair"

converge(PROFILE)
