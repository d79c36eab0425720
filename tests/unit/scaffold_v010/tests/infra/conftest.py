"""Entry point of specfleet's testinfra suite (the suite itself is package code: specfleet/testinfra/).

    SPECFLEET_INVENTORY=inventory/fleet.yml pytest tests/infra
"""

from specfleet.testinfra.fixtures import pytest_configure, spark  # noqa: F401
