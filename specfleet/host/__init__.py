"""Programs specfleet installs on each host (run there, not on the controller)."""
