"""A pair's units as rendered (issue 19, point 4, the rendering; the host jobs that start, gate and revert the pair are
not built, and a deploy still refuses a pair): the head's container runs the MPI launch with the pair's directory
read-only and the worker's login and port in its environment; the worker's container holds its side up, with the
same model mounts and no MPI key. Read back with the reference parser of systemd's quoting (test_quoting.py) and
with systemd-analyze; a single Spark's unit is unchanged (test_golden_render.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from specfleet.host.layout import PAIR_AGENT
from specfleet.pair_launch import RANK_COMMAND
from specfleet.render import serve_args, unit_text
from tests.unit.test_pair_trust import _plans
from tests.unit.test_quoting import exec_line

PAIR_ONLY = [("-v", "/var/lib/specfleet/pair:/opt/specfleet-pair:ro"), ("-e", "SPECFLEET_PAIR_USER=specfleet-mpi"),
             ("-e", "SPECFLEET_PAIR_PORT=22")]  # the head's alone


def _units():
    plans = _plans()
    return {h: (p.settings, unit_text(p.settings)) for h, p in plans.items()}


def test_the_heads_unit_runs_the_mpi_launch_with_the_pair_directory_read_only():
    s, unit = _units()["spark-1"]
    argv = exec_line(unit, "ExecStart")
    image = argv.index(s.image)
    docker, command = argv[:image], argv[image + 1:]
    for flag, value in PAIR_ONLY:
        assert docker[docker.index(value) - 1] == flag, value
    assert command[:2] == ["mpirun", "--allow-run-as-root"]
    assert command[command.index("plm_rsh_agent") + 1] == PAIR_AGENT
    launch = command.index(RANK_COMMAND[0])
    assert command[launch:launch + len(RANK_COMMAND)] == RANK_COMMAND  # systemd hands bash the script unchanged
    assert command[launch + len(RANK_COMMAND):] == ["trtllm-serve", *serve_args(s)]
    assert "--tp_size" in command and not [a for a in docker if "mpi_key" in a or ".ssh" in a]


def test_the_workers_unit_holds_its_container_up_with_the_models_and_no_key():
    units = _units()
    (head, head_unit), (worker, worker_unit) = units["spark-1"], units["spark-2"]
    argv = exec_line(worker_unit, "ExecStart")
    image = argv.index(worker.image)
    assert argv[image + 1:] == ["sleep", "infinity"]
    head_argv = exec_line(head_unit, "ExecStart")
    head_docker = head_argv[:head_argv.index(head.image)]
    for flag, value in PAIR_ONLY:  # the head's docker arguments without the pair's mount and environment
        i = head_docker.index(value)
        head_docker = head_docker[:i - 1] + head_docker[i + 1:]
    # the same container otherwise: name, GPUs, host network and IPC, the model, draft and config mounts
    assert argv[:image] == head_docker
    assert not {value for _, value in PAIR_ONLY} & set(argv)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_real_systemd_parses_both_units_without_warnings(tmp_path):
    for host, (s, unit) in _units().items():
        path = tmp_path / f"{host}-{s.service_name}.service"
        path.write_text(unit)
        out = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
        assert not [line for line in (out.stdout + out.stderr).splitlines() if f"{path}:" in line], out.stderr
