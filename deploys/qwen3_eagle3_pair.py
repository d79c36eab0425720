"""Converge the pairs of the inventory into two-Spark (TP=2) trtllm-serve servers for the qwen3_eagle3_pair profile
(`specfleet profiles` shows it): the link, the pair's keys, the models on both hosts, and the head's job switching both."""

from specfleet.steps import converge

PROFILE = "qwen3_eagle3_pair"

converge(PROFILE)
