"""The container hosts' STAND-IN runtime (container_files/usr/local/bin/runc-container-host-STANDIN): each rlimit of
a bundle's config.json (runc create/run) or of an exec's process file (runc exec --process) above the hard limit it
has is clamped to it and logged, others are left; a new container gets the host's /proc/meminfo bound over its own;
then runc runs with the same arguments."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

CLAMP = (Path(__file__).resolve().parents[2] / "lab" / "specfleet_lab" / "container_files" / "usr" / "local" / "bin"
         / "runc-container-host-STANDIN")


@pytest.fixture
def run(tmp_path):
    """Run the clamp with a fake runc that records its arguments; its log in tmp_path."""
    fake = tmp_path / "runc"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/runc-args\n")
    fake.chmod(0o755)
    env = {**os.environ, "RUNC_CLAMP_RUNC": str(fake), "RUNC_CLAMP_LOG": str(tmp_path / "clamps.log"),
           "RUNC_HOST_MEMINFO": "/host/meminfo"}

    def go(*args: str) -> str:
        subprocess.run([sys.executable, str(CLAMP), *args], env=env, check=True, timeout=30)
        return (tmp_path / "runc-args").read_text().strip()
    return go


def _rlimits(hard_memlock: int) -> list[dict]:
    return [{"type": "RLIMIT_MEMLOCK", "hard": hard_memlock, "soft": hard_memlock},
            {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}]


def test_create_clamps_the_bundles_config_and_runs_runc_with_the_same_arguments(run, tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("this machine's own memlock limit is unlimited: nothing to clamp to")
    (tmp_path / "config.json").write_text(json.dumps({"process": {"rlimits": _rlimits(2**64 - 1)}}))
    assert run("--root", "/x", "create", "--bundle", str(tmp_path), "c1") == f"--root /x create --bundle {tmp_path} c1"
    rl = json.loads((tmp_path / "config.json").read_text())["process"]["rlimits"]
    assert rl == [{"type": "RLIMIT_MEMLOCK", "hard": hard, "soft": hard}, _rlimits(0)[1]]
    assert "RLIMIT_MEMLOCK.hard 18446744073709551615->" in (tmp_path / "clamps.log").read_text()


def test_exec_clamps_the_process_file(run, tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard == resource.RLIM_INFINITY:
        pytest.skip("this machine's own memlock limit is unlimited: nothing to clamp to")
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["sh"], "rlimits": _rlimits(2**64 - 1)}))
    run("exec", "--process", str(process), "--detach", "c1")
    assert json.loads(process.read_text())["rlimits"][0]["hard"] == hard  # seen failing before exec was handled


def test_limits_within_reach_are_left_as_they_are(run, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"process": {"rlimits": _rlimits(1024)}}))
    run("run", "-b", str(tmp_path), "c1")
    assert json.loads((tmp_path / "config.json").read_text())["process"]["rlimits"] == _rlimits(1024)
    assert not (tmp_path / "clamps.log").exists()


PROC = {"destination": "/proc", "type": "proc", "source": "proc"}
HOST_MEMINFO = {"destination": "/proc/meminfo", "type": "bind", "source": "/host/meminfo",
                "options": ["rbind", "ro", "nosuid", "nodev", "noexec"]}


def test_a_new_container_reads_the_hosts_meminfo_after_its_own_proc(run, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"process": {"rlimits": _rlimits(1024)}, "mounts": [PROC]}))
    run("create", "--bundle", str(tmp_path), "c1")
    assert json.loads((tmp_path / "config.json").read_text())["mounts"] == [PROC, HOST_MEMINFO]


def test_a_bundle_that_binds_its_own_meminfo_and_an_exec_keep_theirs(run, tmp_path):
    own = {**HOST_MEMINFO, "source": "/elsewhere"}
    (tmp_path / "config.json").write_text(json.dumps({"mounts": [PROC, own]}))
    run("run", "-b", str(tmp_path), "c1")
    assert json.loads((tmp_path / "config.json").read_text())["mounts"] == [PROC, own]
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["sh"]}))
    run("exec", "--process", str(process), "c1")
    assert json.loads(process.read_text()) == {"args": ["sh"]}


def test_a_bundle_with_no_mounts_list_gets_the_hosts_meminfo(run, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"process": {}, "mounts": None}))
    run("create", "--bundle", str(tmp_path), "c1")
    assert json.loads((tmp_path / "config.json").read_text())["mounts"] == [HOST_MEMINFO]
