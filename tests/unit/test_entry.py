"""The `specfleet` entry point patches the process with gevent (pyinfra's API then works on all hosts at once, as
under pyinfra's own CLI), except for `specfleet vm`; `python -m specfleet` is the same entry."""

import subprocess
import sys

import pytest

PROBE = ("import sys; sys.argv = ['specfleet'] + sys.argv[1:]; import specfleet.__main__; "
         "from gevent import monkey; print(monkey.is_module_patched('socket'), monkey.is_module_patched('time'))")


@pytest.mark.parametrize("command, patched", [("rollout", "True True"), ("status", "True True"), ("vm", "False False")])
def test_entry_patches_for_pyinfra_commands_only(command, patched):
    out = subprocess.run([sys.executable, "-c", PROBE, command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == patched.split()


def test_python_m_specfleet_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "specfleet", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "rollout" in out.stdout, out.stderr
