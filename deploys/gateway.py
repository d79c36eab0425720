"""Turn the hosts of the inventory group `gateway` into the fleet's single OpenAI-compatible endpoint (HAProxy, run by
systemd; see specfleet/gateway/steps/gateways.py); the other hosts are not touched. The Sparks' side (their filtering socket
and readiness agent) comes with their own converge (deploys/<profile>.py)."""

from specfleet.steps import gateway

ROLE = "gateway"  # what `specfleet check` validates this deploy for (the gateway hosts' keys and TLS files)

gateway()
