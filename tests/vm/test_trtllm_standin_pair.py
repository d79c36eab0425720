"""The trtllm-serve STAND-IN as a two-rank world: real OpenMPI (Debian's openmpi-bin, mpirun) runs
the stand-in trtllm-llmapi-launch (tests/vm/trtllm_standin/llmapi_launch.sh) and its leader and worker ranks
(pylib/tensorrt_llm/llmapi, mpi4py from python3-mpi4py), here on one machine with both ranks on localhost, as the
head's container runs them across a pair. Each test ends with what is served on the port and which processes are
left. No VM, no docker: seconds."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specfleet.pair.launch import RANK_COMMAND
from tests.vm.test_trtllm_standin import (
    EAGLE_MODEL,
    connect_refused,
    eagle_args,
    free_port,
    http,
    world,  # noqa: F401 (a fixture)
)
from tests.vm.trtllm_standin import image

STANDIN = Path(image.__file__).resolve().parent
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp"]


@pytest.fixture
def pair_env(world, tmp_path):  # noqa: F811 (the fixture imported above)
    """The stand-in's programs as the image names them, the system python3 (mpi4py) first on PATH, and a gate that
    holds rank 1 before it starts (a file: the test opens it, no timing involved)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "trtllm-serve").write_text(f'#!/bin/sh\nexec /usr/bin/python3 {STANDIN / "trtllm_serve.py"} "$@"\n')
    gate = tmp_path / "rank1-may-start"
    (bin_dir / "trtllm-llmapi-launch").write_text(
        "#!/bin/sh\n"
        f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then while [ ! -e {gate} ]; do sleep 0.1; done; fi\n'
        f'exec {STANDIN / "llmapi_launch.sh"} "$@"\n')
    for prog in bin_dir.iterdir():
        prog.chmod(0o755)
    env = world.env(delay=0.5)
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", PYTHONPATH=str(STANDIN / "pylib"))
    return env, gate


class World:
    """`mpirun -np N trtllm-llmapi-launch trtllm-serve ... --tp_size TP`, its output in a file."""

    def __init__(self, w, env, np: int, tp: int, tmp: Path, rank: tuple[str, ...] = ("trtllm-llmapi-launch",)):
        self.port = free_port()
        args = eagle_args(w, self.port)
        args[args.index("--tp_size") + 1] = str(tp)
        self.out = tmp / f"mpirun-{self.port}.log"
        self.proc = subprocess.Popen([*MPIRUN, "-np", str(np), "--host", f"localhost:{np}", *rank,
                                      "trtllm-serve", *args], env=env, stdout=self.out.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.out.read_text()

    def wait_log(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.proc.poll() is None or text in self.log(), self.log()
            assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{self.log()}"
            time.sleep(0.1)

    def wait_serving(self, timeout: float = 60) -> None:
        self.wait_log("Uvicorn-like STAND-IN server listening", timeout)
        assert http(self.port, "GET", "/health")[0] == 200

    def left(self) -> list[str]:
        """This world's processes still running: mpirun's session (its ranks get process groups of their own)."""
        ps = subprocess.run(["ps", "-eo", "sid=,pid=,args="], capture_output=True, text=True).stdout.splitlines()
        return [p.split(None, 1)[1] for p in ps if p.split()[0] == str(self.proc.pid)]

    def ended(self, timeout: float = 30) -> int:
        rc = self.proc.wait(timeout=timeout)
        deadline = time.monotonic() + 10
        while self.left() and time.monotonic() < deadline:
            time.sleep(0.1)
        return rc

    def kill(self) -> None:
        """Teardown, also after a failed test: every process of mpirun's session (the ranks have process groups of
        their own, and rank 1 may still wait at its gate), so nothing outlives the test."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        for line in self.left():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split()[0]), signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def launch(world, pair_env, tmp_path):  # noqa: F811
    env, _ = pair_env
    started = []

    def start(np: int, tp: int, rank: tuple[str, ...] = ("trtllm-llmapi-launch",)) -> World:
        started.append(World(world, env, np, tp, tmp_path, rank))
        return started[-1]

    yield start
    for w in started:
        w.kill()


def _completion(port: int) -> str:
    status, body = http(port, "POST", "/v1/completions", {"model": EAGLE_MODEL, "prompt": "hi", "max_tokens": 4})
    assert status == 200, body
    return body["choices"][0]["text"]


def test_two_ranks_serve_only_once_both_are_up_and_stop_together(launch, pair_env):
    _, gate = pair_env
    w = launch(np=2, tp=2)
    w.wait_log("waiting for the MPI world of 2 ranks")  # trtllm-serve, connecting every 0.5 s
    w.wait_log("joining the MPI world of 2 ranks")  # rank 0's leader; rank 1 is held at the gate
    for _ in range(15):  # a leader that did not wait for rank 1 would have let trtllm-serve in within a second
        assert connect_refused(w.port) and "MPI world: 2 ranks" not in w.log()
        time.sleep(0.2)
    gate.touch()
    w.wait_serving()
    assert "MPI world: 2 ranks on" in w.log() and "mgmn worker node rank 1 up" in w.log()
    assert "STAND-IN" in _completion(w.port)
    w.proc.send_signal(signal.SIGTERM)  # what stopping the head's unit does to mpirun
    assert w.ended() != 0
    assert connect_refused(w.port) and w.left() == []


def test_the_heads_rank_command_keeps_the_session_key_out_of_the_log(launch, pair_env):
    """The launcher's `set -x` (upstream's, and the stand-in's) prints the IPC HMAC key into mpirun's output, the head
    unit's journal; pair_launch.RANK_COMMAND, what the head's mpirun runs on each rank, sends that trace to
    /dev/null. The same world then serves, with the key in place."""
    _, gate = pair_env
    gate.touch()
    for rank, key_in_log in ((("trtllm-llmapi-launch",), True), (tuple(RANK_COMMAND), False)):
        w = launch(np=2, tp=2, rank=rank)
        w.wait_serving()
        assert "STAND-IN" in _completion(w.port)
        assert ("TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY=" in w.log()) is key_in_log, w.log()
        assert ("+ python3 -m tensorrt_llm.llmapi.mgmn_worker_node" in w.log()) is key_in_log  # the whole trace
        w.proc.send_signal(signal.SIGTERM)
        assert w.ended() != 0
        assert connect_refused(w.port) and w.left() == []


def test_a_rank_that_dies_ends_the_whole_world_never_half_of_it(launch, pair_env):
    _, gate = pair_env
    gate.touch()
    w = launch(np=2, tp=2)
    w.wait_serving()
    worker = [p.split()[0] for p in w.left() if "mgmn_worker_node" in p]
    assert len(worker) == 1, w.left()
    os.kill(int(worker[0]), signal.SIGKILL)  # rank 1's process: the worker Spark's side of the world
    assert w.ended() != 0
    assert "exited with non-zero status" in w.log() or "exited on signal" in w.log(), w.log()
    assert connect_refused(w.port) and w.left() == []  # the head does not serve on without its worker


@pytest.mark.parametrize("np, expected", [
    (1, "ERROR: RuntimeError: Only 1 GPUs are available, but 2 are required."),
    (3, "ERROR: ValueError: n_workers must be equal to the number of processes in MPI, got 2 vs 3"),
])
def test_a_world_of_the_wrong_size_is_refused_and_never_listens(launch, pair_env, np, expected):
    _, gate = pair_env
    gate.touch()
    w = launch(np=np, tp=2)
    w.wait_log(expected)
    w.wait_log("MPI Comm Server listening")
    assert "(the port was never listened on)" in w.log()
    time.sleep(2)  # upstream's launcher sends no stop after a failed trtllm-serve (set -e): the world stays up
    assert w.proc.poll() is None and connect_refused(w.port)
    w.proc.send_signal(signal.SIGTERM)  # it ends when it is stopped from outside, as the head's unit will
    w.ended()
    assert connect_refused(w.port) and w.left() == []


def test_tp_size_2_without_mpirun_is_refused(world, pair_env):  # noqa: F811
    env, _ = pair_env
    port = free_port()
    args = eagle_args(world, port)
    args[args.index("--tp_size") + 1] = "2"
    out = subprocess.run(["trtllm-serve", *args], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "ERROR: RuntimeError: Only 1 GPUs are available, but 2 are required." in out.stdout
    assert connect_refused(port)
