"""The Spark's image programs, run as the hosts run them (`python3 -c <text> ARGS`): image_pull.py against a stand-in
of docker's Engine API on a unix socket (the pull's JSON stream, the tag), and insecure_registry.py against a
daemon.json and a stand-in dockerd that rereads it on SIGHUP, as dockerd does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from specfleet.fleet.programs import program
from tests.unit.docker_standin import DockerStandin, Image
from tests.unit.installed import installed

PULL = program("image_pull.py").read_text()
INSECURE = program("insecure_registry.py").read_text()
MIRRORED = "10.1.0.5:5000/nvcr.io/nvidia/x@sha256:" + "a" * 64
UPSTREAM = "nvcr.io/nvidia/x@sha256:" + "d" * 64
TAG = "nvcr.io/nvidia/x:sha256-" + "d" * 64
DIGESTS = f"{UPSTREAM.rpartition('@')[2]},{MIRRORED.rpartition('@')[2]}"  # the lock's: its index's, its platform's
PULLED, OTHER = "sha256:" + "1" * 64, "sha256:" + "2" * 64  # image ids


@pytest.fixture
def engine(tmp_path):
    """docker's Engine API STAND-IN (tests/unit/docker_standin.py) on the socket the programs are pointed at."""
    def start(images=(), stream=(), registry=None, containers=()):
        server = DockerStandin(str(tmp_path / "docker.sock"), list(images),
                               {MIRRORED: PULLED} if registry is None else registry, list(stream), list(containers))
        servers.append(server)
        return server
    servers: list[DockerStandin] = []
    yield start
    for s in servers:
        s.stop()


def _pull(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed()), "SPECFLEET_DOCKER_SOCKET": str(tmp_path / "docker.sock"),
           "SPECFLEET_PROGRESS_FILE": str(tmp_path / "progress.json")}
    return subprocess.run([sys.executable, "-c", PULL, "--pull", MIRRORED, "--tag", TAG, "--have", UPSTREAM,
                           "--bytes", "3000", "--digests", DIGESTS, *extra], capture_output=True, text=True, timeout=60, env=env)


STREAM = [{"status": "Pulling fs layer", "id": "l1"}, {"status": "Pulling fs layer", "id": "l2"},
          {"status": "Downloading", "id": "l1", "progressDetail": {"current": 1000, "total": 2000}},
          {"status": "Downloading", "id": "l2", "progressDetail": {"current": 1000, "total": 1000}},
          {"status": "Download complete", "id": "l1"}, {"status": "Pull complete", "id": "l1"},
          {"status": "Pull complete", "id": "l2"}, {"status": f"Digest: {MIRRORED.rpartition('@')[2]}"}]


def test_a_pull_from_the_mirror_is_tagged_as_the_unit_runs_it(engine, tmp_path):
    docker = engine(stream=STREAM)
    run = _pull(tmp_path)
    assert run.returncode == 0, run.stderr
    assert docker.calls[-2:] == [("GET", MIRRORED), ("TAG", MIRRORED, TAG)]
    assert ("PULL", MIRRORED) in docker.calls
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert (progress["kind"], progress["bytes_done"], progress["bytes_total"]) == ("pull", 3000, 3000)
    assert (progress["layers_done"], progress["layers_total"]) == (2, 2)


def test_the_upstream_reference_on_the_host_is_only_tagged(engine, tmp_path):
    docker = engine(images=[Image(PULLED, digests=[UPSTREAM])])
    run = _pull(tmp_path)
    assert run.returncode == 0 and "nothing pulled" in run.stdout, run.stderr
    assert not [c for c in docker.calls if c[0] == "PULL"] and ("TAG", UPSTREAM, TAG) in docker.calls


def test_a_host_with_the_tag_on_the_pinned_image_asks_nothing_more(engine, tmp_path):
    docker = engine(images=[Image(PULLED, tags=[TAG], digests=[MIRRORED])])
    assert _pull(tmp_path).returncode == 0 and docker.calls == [("GET", TAG)]


def test_a_tag_on_another_image_is_moved_to_the_pinned_one(engine, tmp_path):
    """`docker tag anything nvcr.io/nvidia/x:sha256-<hex>`: the tag alone proves nothing, RepoDigests do."""
    docker = engine(images=[Image(OTHER, tags=[TAG], digests=["nvcr.io/nvidia/x@sha256:" + "e" * 64])],
                    stream=STREAM)
    run = _pull(tmp_path)
    assert run.returncode == 0, run.stderr
    assert f"{TAG} is on another image ({OTHER[:19]}, none of whose digests the lock records)" in run.stdout
    assert ("PULL", MIRRORED) in docker.calls and docker.resolve(TAG).id == PULLED
    assert docker.images[OTHER].tags == []  # the other image keeps its bytes, not the tag


@pytest.mark.parametrize("stream, registry", [
    ([{"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown: manifest unknown"}],
     {MIRRORED: PULLED}),
    (STREAM, {}),  # docker said nothing wrong, yet has no image answering to the digest
])
def test_a_failed_pull_tags_nothing(engine, tmp_path, stream, registry):
    docker = engine(stream=stream, registry=registry)
    run = _pull(tmp_path)
    assert run.returncode != 0 and run.stderr.strip().splitlines()[-1].startswith("image-pull: "), run.stderr
    assert not [c for c in docker.calls if c[0] == "TAG"] and docker.resolve(TAG) is None


# ---- insecure_registry.py -----------------------------------------------------------------------------------------
FAKE_DOCKERD = textwrap.dedent("""
    import json, signal, sys, time
    daemon_json, state, obeys = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    def reload(*_):
        if obeys:
            names = json.load(open(daemon_json)).get("insecure-registries", [])
            json.dump({n: {"Secure": False} for n in names}, open(state, "w"))
    signal.signal(signal.SIGHUP, reload)
    open(state, "w").write("{}")
    print("ready", flush=True)
    while True:
        time.sleep(1)
""")


@pytest.fixture
def dockerd(tmp_path):
    """A stand-in dockerd (rereads daemon.json on SIGHUP when it `obeys`) and a `docker info` that reports it."""
    procs = []

    def start(obeys: bool = True):
        state = tmp_path / "dockerd-state.json"
        proc = subprocess.Popen([sys.executable, "-c", FAKE_DOCKERD, str(tmp_path / "daemon.json"), str(state),
                                 "1" if obeys else "0"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        procs.append(proc)
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        (bin_dir / "docker").write_text(f"#!/bin/sh\ncat {state}\n")
        (bin_dir / "docker").chmod(0o755)
        (tmp_path / "pid").write_text(str(proc.pid))
        return proc
    yield start
    for p in procs:
        p.kill()
        p.wait()


def _insecure(tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run([sys.executable, "-c", INSECURE, "--add", "10.1.0.5:5000", "--daemon-json",
                           str(tmp_path / "daemon.json"), "--pid-command", f"cat {tmp_path / 'pid'}",
                           "--wait-sec", "3"],
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_registry_is_merged_into_daemon_json_and_reloaded_without_a_restart(dockerd, tmp_path):
    (tmp_path / "daemon.json").write_text(json.dumps({"runtimes": {"nvidia": {"path": "x"}},
                                                      "insecure-registries": ["10.9.9.9:5000"]}))
    proc = dockerd()
    run = _insecure(tmp_path)
    assert run.returncode == 0, run.stderr
    config = json.loads((tmp_path / "daemon.json").read_text())
    assert config == {"runtimes": {"nvidia": {"path": "x"}}, "insecure-registries": ["10.9.9.9:5000", "10.1.0.5:5000"]}
    assert proc.poll() is None  # the same dockerd, reloaded
    assert _insecure(tmp_path).returncode == 0
    assert json.loads((tmp_path / "daemon.json").read_text())["insecure-registries"].count("10.1.0.5:5000") == 1


def test_a_daemon_json_that_is_not_json_is_refused_unchanged(dockerd, tmp_path):
    (tmp_path / "daemon.json").write_text("{not json")
    proc = dockerd()
    run = _insecure(tmp_path)
    assert run.returncode == 1 and "is not readable JSON" in run.stderr
    assert (tmp_path / "daemon.json").read_text() == "{not json" and proc.poll() is None


def test_a_dockerd_that_does_not_take_the_reload_is_one_line(dockerd, tmp_path, monkeypatch):
    proc = dockerd(obeys=False)
    run = _insecure(tmp_path)
    assert run.returncode == 1 and "did not take insecure-registries 10.1.0.5:5000" in run.stderr, run.stderr
    assert proc.poll() is None
