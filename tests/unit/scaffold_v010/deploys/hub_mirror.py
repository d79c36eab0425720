"""Turn the hosts of the inventory group `hub_mirror` into the fleet's Hub mirror (olah, run by systemd); the
other hosts are not touched. A profile deploy (deploys/eagle3.py, specfleet rollout) also sets it up, then warms
it with exactly the files the fleet still needs before the other hosts stage from it."""

from specfleet.steps import mirror_setup

mirror_setup()
