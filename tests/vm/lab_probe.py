"""Run by tests/vm/test_lab_cleanup.py in a child test session, never collected on its own (its name is no test
module's): the session's fleet comes up through the VM tier's fixtures, says so in SPECFLEET_PROBE_READY, and waits
to be signalled."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vm


def test_wait_with_the_session_fleet_up(vm_fleet):
    Path(os.environ["SPECFLEET_PROBE_READY"]).write_text(json.dumps({"hosts": len(vm_fleet.guests)}) + "\n")
    time.sleep(900)
