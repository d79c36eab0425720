"""A converged specfleet host: the packaged checks (specfleet/testinfra/converged.py), once per host."""

from specfleet.testinfra.converged import *  # noqa: F401,F403
