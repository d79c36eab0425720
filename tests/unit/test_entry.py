"""The `specfleet` entry point patches the process with gevent (pyinfra's API then works on all hosts at once, as
under pyinfra's own CLI), for every command; `python -m specfleet` is the same entry. The VM lab is a command of
its own (`specfleet-lab`, the `specfleet_lab` distribution) that runs unpatched."""

import subprocess
import sys

import pytest

PROBE = ("import sys; sys.argv = ['specfleet'] + sys.argv[1:]; import specfleet.__main__; "
         "from gevent import monkey; print(monkey.is_module_patched('socket'), monkey.is_module_patched('time'))")


@pytest.mark.parametrize("command, patched", [("rollout", "True True"), ("status", "True True"), ("check", "True True")])
def test_entry_patches_for_every_command(command, patched):
    out = subprocess.run([sys.executable, "-c", PROBE, command], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == patched.split()


def test_python_m_specfleet_is_the_cli():
    out = subprocess.run([sys.executable, "-m", "specfleet", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "rollout" in out.stdout, out.stderr


def test_the_lab_is_a_command_of_its_own_without_gevent():
    out = subprocess.run([sys.executable, "-m", "specfleet", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not any(line.split()[:1] == ["vm"] for line in out.stdout.splitlines())
    lab = subprocess.run([sys.executable, "-c", "import sys; sys.argv = ['specfleet-lab', '--help']; "
                          "import specfleet_lab.cli as c; c.main(standalone_mode=False); print('gevent' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert lab.returncode == 0, lab.stderr
    assert "build-image" in lab.stdout and lab.stdout.split()[-1] == "False"


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "specfleet", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"specfleet {version('specfleet')}\n"
