"""The pair gate (the worker's forced command for the head's MPI key): OpenMPI's real launch lines pass and become
one `docker exec` in the serving container; anything else is refused with one line and runs nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.pair.host.pair_gate import Refused, launch_argv, switch_argv, wait_running
from tests.unit.installed import installed, source

GATE = installed() / "pair_gate.py"
LINES = [line for line in (Path(__file__).parent / "pair_launch_lines.txt").read_text().splitlines()
         if line and not line.startswith("#")]
AGENT = "/tmp/ompi/rec.sh"  # the recording agent the lines were taken with (their plm_rsh_agent)


def _run_gate(tmp_path: Path, asked: str | None, running: bool = True, wait: bool = False):
    """The gate as sshd runs it, with a `docker` on PATH that records its argv instead of running anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # inspect: the container runs once tmp_path/running exists (each ask noted in tmp_path/asked)
    (bin_dir / "docker").write_text(
        f'#!/bin/sh\nif [ "$1" = inspect ]; then echo >> {tmp_path}/asked; '
        f'[ -e {tmp_path}/running ] && echo true || echo false; exit 0; fi\n'
        f'for a in "$@"; do echo "$a"; done > {tmp_path}/docker.argv\n')
    (bin_dir / "docker").chmod(0o755)
    if running:
        (tmp_path / "running").touch()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if asked is not None:
        env["SSH_ORIGINAL_COMMAND"] = asked
    argv = [sys.executable, str(GATE), "--container", "trtllm-serve", "--agent", AGENT]
    if not wait:
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_openmpis_launch_lines_run_orted_in_the_container_and_nothing_else():
    assert len(LINES) == 2
    for line in LINES:
        argv = launch_argv(line, "trtllm-serve", AGENT)
        assert argv[:5] == ["docker", "exec", "-i", "trtllm-serve", "orted"]
        # the shell's quoting is undone once, as the remote shell would have
        assert "env" in argv and '"env"' not in argv
        assert argv[argv.index("orte_hnp_uri") + 1].startswith(tuple("0123456789"))
        assert not any("hf_secret" in a or "CPATH" in a for a in argv)  # -x values travel over mpirun's own link


def test_the_gate_program_execs_docker_with_the_launch(tmp_path):
    result = _run_gate(tmp_path, LINES[1])
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "docker.argv").read_text().splitlines()
    assert argv[:4] == ["exec", "-i", "trtllm-serve", "orted"] and "--daemonize" in argv


def test_a_launch_waits_for_the_workers_container_to_run(tmp_path):
    """The container is down (its unit restarting it after a crash): the launch waits for it, then execs orted in it;
    nothing runs meanwhile. The test starts the container once the gate has asked twice (a file, no timing)."""
    gate = _run_gate(tmp_path, LINES[1], running=False, wait=True)
    try:
        deadline = time.monotonic() + 30
        while len((tmp_path / "asked").read_text().splitlines() if (tmp_path / "asked").exists() else []) < 2:
            assert gate.poll() is None and time.monotonic() < deadline, gate.communicate()
            time.sleep(0.05)
        assert not (tmp_path / "docker.argv").exists()  # nothing ran while the container was down
        (tmp_path / "running").touch()
        _, err = gate.communicate(timeout=30)
    finally:
        gate.kill()
    assert gate.returncode == 0, err
    assert (tmp_path / "docker.argv").read_text().splitlines()[:4] == ["exec", "-i", "trtllm-serve", "orted"]


def test_wait_running_reads_docker_inspect(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\necho false\n")
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert wait_running("trtllm-serve", seconds=0) is False
    (bin_dir / "docker").write_text("#!/bin/sh\necho true\n")
    assert wait_running("trtllm-serve", seconds=0) is True


@pytest.mark.parametrize("asked, why", [
    (None, "no command"),
    ("id", "'id' is not orted"),
    ("sh -c id", "'sh' is not orted"),
    ("/usr/bin/orted -mca ess env", "'/usr/bin/orted' is not orted"),
    ("orted; id", "'orted;' is not orted"),
    ("orted -mca ess env; id", "'id' is not an orted flag"),
    ("orted -mca ess env && id", "'&&' is not an orted flag"),
    ("orted -mca orte_fork_agent /bin/sh", "MCA parameter 'orte_fork_agent' is not one a pair launch sets"),
    ("orted -mca plm_rsh_agent /bin/sh", "MCA parameter plm_rsh_agent: '/bin/sh' is not the pair's"),
    ("orted -mca ess 'env id'", "a value with whitespace"),
    ("orted -mca ess", "-mca without a KEY and a VALUE"),
    ("orted -mca ess \"env", "not one command (No closing quotation)"),
    ("orted --debug", "'--debug' is not an orted flag"),
])
def test_anything_but_a_launch_is_refused_and_runs_nothing(tmp_path, asked, why):
    with pytest.raises(Refused, match=None) as refused:
        launch_argv(asked, "trtllm-serve", AGENT)
    assert why in str(refused.value)
    result = _run_gate(tmp_path, asked)
    assert result.returncode == 126 and result.stdout == ""
    assert result.stderr.startswith("pair-gate: refused: ") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "docker.argv").exists()  # nothing ran


def test_a_launch_line_changed_in_one_place_is_refused():
    """Each recorded line passes as it is; swapping its rsh agent for a shell, or adding a parameter outside the
    launch's, is refused: the allowlist is what makes the gate, not the first word."""
    line = LINES[1]
    launch_argv(line, "trtllm-serve", AGENT)
    with pytest.raises(Refused):
        launch_argv(line.replace(AGENT, "/bin/bash"), "trtllm-serve", AGENT)
    with pytest.raises(Refused):
        launch_argv(line + ' -mca orte_launch_agent "/bin/sh"', "trtllm-serve", AGENT)


# ---- the head's switch of the pair (pair/host/pair_switch.py): the gate's second and last command ----------------------
SWITCH = "specfleet-host activate r-0123456789ab --pair-worker"


def _installed_gate(tmp_path: Path) -> Path:
    """The gate as installed on a worker: <data_dir>/bin/pair-gate beside layout.py and a host tool that records."""
    bin_dir = tmp_path / "data" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pair-gate").write_text(GATE.read_text())
    (bin_dir / "layout.py").write_text(source("layout.py").read_text())
    (bin_dir / "specfleet-host").write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > {tmp_path}/tool.argv\n')
    (bin_dir / "specfleet-host").chmod(0o755)
    return bin_dir / "pair-gate"


def _run_installed(gate: Path, asked: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(gate), *(args or ("--switch",))],
                          env={"PATH": "/usr/bin:/bin", "SSH_ORIGINAL_COMMAND": asked}, capture_output=True,
                          text=True, timeout=30)


def test_the_switch_keys_gate_runs_the_heads_switch_as_the_host_tool_beside_it(tmp_path):
    gate = _installed_gate(tmp_path)
    result = _run_installed(gate, SWITCH)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tool.argv").read_text().splitlines() == ["activate", "r-0123456789ab", "--pair-worker"]
    assert switch_argv(SWITCH)[0] == str(source("pair_gate.py").parent / "specfleet-host")


def test_the_switch_keys_gate_runs_the_heads_revert_of_a_first_pair_release(tmp_path):
    """The second form the switch key may ask: the worker leaves a failed first pair release (pair_switch.leave)."""
    gate = _installed_gate(tmp_path)
    result = _run_installed(gate, "specfleet-host leave-pair r-0123456789ab")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tool.argv").read_text().splitlines() == ["leave-pair", "r-0123456789ab"]


def test_each_keys_gate_refuses_the_other_keys_command(tmp_path):
    """The MPI key (in the head's container) cannot switch the worker; the switch key cannot launch orted."""
    gate = _installed_gate(tmp_path)
    mpi = _run_installed(gate, SWITCH, "--container", "trtllm-serve", "--agent", AGENT)
    assert mpi.returncode == 126 and "'specfleet-host' is not orted" in mpi.stderr, mpi.stderr
    switch = _run_installed(gate, LINES[1])
    assert switch.returncode == 126 and "'orted' is not specfleet-host" in switch.stderr, switch.stderr
    assert not (tmp_path / "tool.argv").exists() and not (tmp_path / "docker.argv").exists()
    neither = _run_installed(gate, SWITCH, "--container", "trtllm-serve")
    assert neither.returncode == 2 and "--switch" in neither.stderr  # a gate line of neither kind: a usage error


@pytest.mark.parametrize("asked", [
    "specfleet-host activate r-0123456789ab",  # a plain activate: a worker's release is its head's to switch
    "specfleet-host activate r-0123456789ab --pair-worker --revert",
    "specfleet-host activate r-0123456789ab --pair-worker; id",
    "specfleet-host activate 'r-0123456789ab --timeout 1' --pair-worker",
    "specfleet-host activate r-0123456789AB --pair-worker",
    "specfleet-host activate ../../r-0123456789ab --pair-worker",
    "specfleet-host activate r-0123456789ab --revert",  # four words with a release id, but not the switch's
    "specfleet-host unlock r-0123456789ab --force",
    "specfleet-host leave-pair",  # the leave's forms: an id, exactly, and nothing after it
    "specfleet-host leave-pair r-0123456789ab --pair-worker",
    "specfleet-host leave-pair r-0123456789ab; id",
    "specfleet-host leave-pair ../r-0123456789ab",
    "specfleet-host leave-pair r-0123456789ab x",
    "specfleet-host activate r-0123456789ab leave-pair",
    "specfleet-host prune --keep 0",
    "specfleet-host job start k -- /bin/sh",
    "specfleet-host --data-dir /tmp activate r-0123456789ab --pair-worker",
    "/var/lib/specfleet/bin/specfleet-host activate r-0123456789ab --pair-worker",
])
def test_any_other_host_tool_command_is_refused_and_runs_nothing(tmp_path, asked):
    gate = _installed_gate(tmp_path)
    result = _run_installed(gate, asked)
    assert result.returncode == 126 and result.stderr.startswith("pair-gate: refused: "), result.stderr
    assert not (tmp_path / "tool.argv").exists()
