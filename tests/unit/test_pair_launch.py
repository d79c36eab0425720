"""The head's MPI launch (pair_launch.mpirun_argv) against the worker's gate: Debian's real OpenMPI runs the launch
line with a recording rsh agent in place of the pair's, and the daemon launch it asks the worker to run must pass
pair/host/pair_gate.py as the pair's own (the agent path put back), so that the head's launch and the worker's gate
cannot drift apart. The head's own link address is replaced by localhost in -H: this machine does not have it, and
mpirun then starts the head's rank here instead of asking the agent."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from specfleet.engines.command import serve_args
from specfleet.host.layout import PAIR_AGENT
from specfleet.pair.host.pair_gate import launch_argv
from specfleet.pair.launch import RANK_COMMAND, mpirun_argv
from tests.unit.test_pair_trust import _plans


def _recorded_lines(tmp_path, argv: list[str]) -> list[str]:
    recorder = tmp_path / "rec.sh"
    recorder.write_text(f'#!/bin/sh\nshift\necho "$*" >> {tmp_path}/lines\nexit 1\n')
    recorder.chmod(0o755)
    argv = [str(recorder) if a == PAIR_AGENT else a for a in argv]
    subprocess.run(["timeout", "60", *argv[:argv.index(RANK_COMMAND[0])], "true"], capture_output=True)
    return [line.replace(str(recorder), PAIR_AGENT) for line in (tmp_path / "lines").read_text().splitlines()]


def test_the_heads_launch_asks_the_worker_for_a_daemon_launch_its_gate_lets_through(tmp_path):
    assert shutil.which("mpirun"), "openmpi-bin is missing: run tests/install-deps.sh"
    head = _plans()["spark-1"].settings
    argv = mpirun_argv(head, serve_args(head))
    assert argv[argv.index("-H") + 1] == "192.168.100.10:1,192.168.100.11:1"
    assert argv[argv.index("trtllm-llmapi-launch") + 1:][:2] == ["trtllm-serve", "nvidia/Qwen3-235B-A22B-FP4"]
    assert "--tp_size" in argv and argv[argv.index("--tp_size") + 1] == "2"
    local = [a.replace("192.168.100.10:1", "localhost:1") for a in argv]
    lines = _recorded_lines(tmp_path, local)
    assert len(lines) == 1 and lines[0].split()[0] == "orted"
    run = launch_argv(lines[0], "specfleet-trtllm", PAIR_AGENT)
    assert run[:5] == ["docker", "exec", "-i", "specfleet-trtllm", "orted"]
    for key, value in (("plm_rsh_agent", PAIR_AGENT), ("btl_tcp_if_include", "192.168.100.0/24,192.168.101.0/24"),
                       ("oob_tcp_if_include", "192.168.100.0/24,192.168.101.0/24")):
        assert any(run[i + 1] == key and run[i + 2] == value for i, w in enumerate(run) if w in ("-mca", "--mca")), key


@pytest.mark.parametrize("extra", [["--mca", "orte_fork_agent", "/bin/sh"], ["--mca", "orte_tmpdir_base", "/tmp"]])
def test_a_launch_with_a_parameter_the_gate_does_not_know_is_refused(tmp_path, extra):
    """The same path with one more MCA parameter on mpirun: OpenMPI forwards it to the worker, the gate refuses."""
    head = _plans()["spark-1"].settings
    argv = [a.replace("192.168.100.10:1", "localhost:1") for a in mpirun_argv(head, serve_args(head))]
    argv = [argv[0], *extra, *argv[1:]]
    lines = _recorded_lines(tmp_path, argv)
    assert lines
    with pytest.raises(ValueError, match=f"MCA parameter '{extra[1]}' is not one a pair launch sets"):
        launch_argv(lines[0], "specfleet-trtllm", PAIR_AGENT)
