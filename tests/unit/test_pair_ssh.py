"""The pair's MPI key against a real OpenSSH server: the worker's authorized_keys line (pair_files.authorized_key)
and the pair gate, with the host key pinned on the client (StrictHostKeyChecking=yes and a known_hosts of the
pair's own). `ssh worker id` is refused by the gate and runs nothing; OpenMPI's launch line reaches `docker exec`;
the key is refused from another source address; a host key that is not the pinned one stops the client.

sshd is Debian's openssh-server (tests/install-deps.sh), run on a free loopback port for the test's lifetime."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.host.layout import PAIR_AGENT_FILE, PAIR_KEY_FILE, PAIR_KNOWN_HOSTS_FILE
from specfleet.pair.render import authorized_key, known_hosts
from tests.unit.test_bench import free_port
from tests.unit.test_pair_gate import AGENT, GATE, LINES

SSHD = "/usr/sbin/sshd"
AGENT_SCRIPT = GATE.parent / "pair_agent.sh"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sshd runs as root (CI and the lab machine are root)")


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@pytest.fixture
def worker(tmp_path):
    """A real sshd whose only authorized key is the pair key, limited by `from` to `sources`."""
    assert Path(SSHD).exists(), "openssh-server is missing: run tests/install-deps.sh"
    port = free_port()
    host_pub = _keygen(tmp_path / "host_key")
    pair_pub = _keygen(tmp_path / "pair_key")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "docker").write_text(  # its container runs; the exec's argv recorded
        f'#!/bin/sh\n[ "$1" = inspect ] && {{ echo true; exit 0; }}\nfor a in "$@"; do echo "$a"; done > {tmp_path}/docker.argv\n')
    (tmp_path / "bin" / "docker").chmod(0o755)
    gate = f"env PATH={tmp_path}/bin:/usr/bin:/bin {sys.executable} {GATE} --container trtllm-serve --agent {AGENT}"
    # the switch key's gate, installed as on a worker: beside layout.py and a host tool that records its argv
    switch_pub = _keygen(tmp_path / "switch_key")
    (tmp_path / "installed").mkdir()
    for name, text in (("pair-gate", GATE.read_text()), ("layout.py", (GATE.parent / "layout.py").read_text()),
                       ("specfleet-host", f'#!/bin/sh\nfor a in "$@"; do echo "$a"; done > {tmp_path}/tool.argv\n')):
        (tmp_path / "installed" / name).write_text(text)
    (tmp_path / "installed" / "specfleet-host").chmod(0o755)
    switch_gate = f"env PATH=/usr/bin:/bin {sys.executable} {tmp_path}/installed/pair-gate --switch"
    (tmp_path / "known_hosts").write_text(known_hosts(host_pub, ["127.0.0.1/32"], port))
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory

    def start(sources: list[str]) -> subprocess.Popen:
        (tmp_path / "authorized_keys").write_text(authorized_key(pair_pub, sources, gate, "pair_a")
                                                  + authorized_key(switch_pub, sources, switch_gate, "pair_a-switch"))
        (tmp_path / "sshd_config").write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {tmp_path}/host_key",
            f"AuthorizedKeysFile {tmp_path}/authorized_keys", "StrictModes no", "UsePAM no",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin forced-commands-only",
            f"PidFile {tmp_path}/sshd.pid", "LogLevel VERBOSE", ""]))
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp_path / "sshd_config")], stderr=subprocess.DEVNULL)
        for _ in range(100):
            if subprocess.run(["ssh-keyscan", "-p", str(port), "127.0.0.1"], capture_output=True).stdout:
                return proc
            time.sleep(0.1)
        raise AssertionError("sshd did not listen")

    procs = []
    yield tmp_path, port, lambda sources: procs.append(start(sources))
    for p in procs:
        p.terminate()
        p.wait(10)


def _ssh(tmp_path: Path, port: int, command: str, known_hosts: str = "known_hosts",
         key: str = "pair_key") -> subprocess.CompletedProcess:
    argv = ["ssh", "-F", "/dev/null", "-i", str(tmp_path / key), "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={tmp_path / known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "GlobalKnownHostsFile=/dev/null",
            "-p", str(port), f"{getpass.getuser()}@127.0.0.1", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_the_key_runs_the_launch_and_ssh_worker_id_is_refused(worker):
    tmp_path, port, start = worker
    start(["127.0.0.1/32"])
    refused = _ssh(tmp_path, port, "id")
    assert refused.returncode == 126 and "pair-gate: refused: 'id' is not orted" in refused.stderr
    assert "uid=" not in refused.stdout and not (tmp_path / "docker.argv").exists()
    launched = _ssh(tmp_path, port, LINES[1])
    assert launched.returncode == 0, launched.stderr
    assert (tmp_path / "docker.argv").read_text().splitlines()[:4] == ["exec", "-i", "trtllm-serve", "orted"]


def test_the_switch_key_runs_the_switch_only_and_the_mpi_key_cannot_switch(worker):
    """Each key reaches its own gate line: the MPI key (the head's container has it) cannot switch the worker, the
    switch key (the head's host only) cannot launch orted, and the switch reaches the host tool as its argv."""
    tmp_path, port, start = worker
    start(["127.0.0.1/32"])
    switch = "specfleet-host activate r-0123456789ab --pair-worker"
    by_mpi_key = _ssh(tmp_path, port, switch)
    assert by_mpi_key.returncode == 126 and "'specfleet-host' is not orted" in by_mpi_key.stderr
    assert not (tmp_path / "tool.argv").exists()
    launch = _ssh(tmp_path, port, LINES[1], key="switch_key")
    assert launch.returncode == 126 and "'orted' is not specfleet-host" in launch.stderr
    assert not (tmp_path / "docker.argv").exists()
    switched = _ssh(tmp_path, port, switch, key="switch_key")
    assert switched.returncode == 0, switched.stderr
    assert (tmp_path / "tool.argv").read_text().splitlines() == ["activate", "r-0123456789ab", "--pair-worker"]


def test_the_key_is_refused_from_another_address_and_by_an_unpinned_host(worker):
    tmp_path, port, start = worker
    start(["192.168.100.10/24"])  # the head's link address: this test connects from 127.0.0.1
    denied = _ssh(tmp_path, port, LINES[1])
    assert denied.returncode == 255 and "Permission denied" in denied.stderr
    assert not (tmp_path / "docker.argv").exists()
    shutil.copy(tmp_path / "known_hosts", tmp_path / "other_hosts")
    other = _keygen(tmp_path / "other_host_key")
    (tmp_path / "other_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(other.split()[:2])}\n")
    stopped = _ssh(tmp_path, port, LINES[1], known_hosts="other_hosts")
    assert stopped.returncode == 255 and "Host key verification failed" in stopped.stderr


def test_mpiruns_rsh_agent_reaches_the_gate_with_the_pair_files_beside_it(worker):
    """pair/host/pair_agent.sh as mpirun runs it (`pair-agent HOST orted ...`, the recorded launch's words), from a
    directory holding only the pair's key and known_hosts under the layout's names, as the head's container sees it."""
    tmp_path, port, start = worker
    start(["127.0.0.1/32"])
    pair = tmp_path / "pair"
    pair.mkdir()
    shutil.copy(AGENT_SCRIPT, pair / PAIR_AGENT_FILE)
    shutil.copy(tmp_path / "pair_key", pair / PAIR_KEY_FILE)
    shutil.copy(tmp_path / "known_hosts", pair / PAIR_KNOWN_HOSTS_FILE)
    env = {"PATH": "/usr/bin:/bin", "SPECFLEET_PAIR_PORT": str(port), "SPECFLEET_PAIR_USER": getpass.getuser()}

    def agent(*words: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(pair / PAIR_AGENT_FILE), "127.0.0.1", *words], env=env, capture_output=True,
                              text=True, timeout=60)

    refused = agent("id")
    assert refused.returncode == 126 and "pair-gate: refused: 'id' is not orted" in refused.stderr
    assert not (tmp_path / "docker.argv").exists()
    launched = agent(*LINES[1].split(" "))
    assert launched.returncode == 0, launched.stderr
    assert (tmp_path / "docker.argv").read_text().splitlines()[:5] == ["exec", "-i", "trtllm-serve", "orted",
                                                                       "--daemonize"]
    unset = subprocess.run([str(pair / PAIR_AGENT_FILE), "127.0.0.1", "orted"], env={"PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=60)
    assert unset.returncode != 0 and "the worker's SSH port" in unset.stderr
