"""The Spark's image programs, run as the hosts run them (`python3 -c <text> ARGS`): image_pull.py against a stand-in
of docker's Engine API on a unix socket (the pull's JSON stream, the tag), and insecure_registry.py against a
daemon.json and a stand-in dockerd that rereads it on SIGHUP, as dockerd does."""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import subprocess
import sys
import textwrap
import threading
import urllib.parse

import pytest

from specfleet.fleet.programs import program
from tests.unit.installed import installed

PULL = program("image_pull.py").read_text()
INSECURE = program("insecure_registry.py").read_text()
MIRRORED = "10.1.0.5:5000/nvcr.io/nvidia/x@sha256:" + "a" * 64
UPSTREAM = "nvcr.io/nvidia/x@sha256:" + "d" * 64
TAG = "nvcr.io/nvidia/x:sha256-" + "d" * 64


class FakeEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """What image_pull.py asks of docker's Engine API: GET /images/<ref>/json, POST /images/create (a JSON stream),
    POST /images/<ref>/tag. `images`: the references docker answers to; `stream`: the pull's events."""

    daemon_threads = True

    def __init__(self, path: str, images: set[str], stream: list[dict], pulled: set[str]):
        self.images, self.stream, self.pulled, self.calls = images, stream, pulled, []
        super().__init__(path, Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def address_string(self):
        return "docker.sock"

    def log_message(self, *args):
        pass

    def _reply(self, status: int, body: bytes = b"{}") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        ref = urllib.parse.unquote(self.path.split("/")[2])
        self.server.calls.append(("GET", ref))
        self._reply(200 if ref in self.server.images else 404)

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/images/create":
            ref = f"{query['fromImage']}@{query['tag']}"
            self.server.calls.append(("PULL", ref))
            body = b"".join(json.dumps(e).encode() + b"\r\n" for e in self.server.stream)
            if not any("error" in e for e in self.server.stream):
                self.server.images |= self.server.pulled
            return self._reply(200, body)
        source = urllib.parse.unquote(url.path.split("/")[2])
        self.server.calls.append(("TAG", source, f"{query['repo']}:{query['tag']}"))
        self.server.images.add(f"{query['repo']}:{query['tag']}")
        self._reply(201, b"")


@pytest.fixture
def engine(tmp_path):
    def start(images=(), stream=(), pulled=(MIRRORED,)):
        server = FakeEngine(str(tmp_path / "docker.sock"), set(images), list(stream), set(pulled))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server
    servers: list[FakeEngine] = []
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _pull(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed()), "SPECFLEET_DOCKER_SOCKET": str(tmp_path / "docker.sock"),
           "SPECFLEET_PROGRESS_FILE": str(tmp_path / "progress.json")}
    return subprocess.run([sys.executable, "-c", PULL, "--pull", MIRRORED, "--tag", TAG, "--have", UPSTREAM,
                           "--bytes", "3000", *extra], capture_output=True, text=True, timeout=60, env=env)


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
    docker = engine(images={UPSTREAM})
    run = _pull(tmp_path)
    assert run.returncode == 0 and "nothing pulled" in run.stdout, run.stderr
    assert not [c for c in docker.calls if c[0] == "PULL"] and ("TAG", UPSTREAM, TAG) in docker.calls


def test_a_host_with_the_tag_asks_nothing_more(engine, tmp_path):
    docker = engine(images={TAG})
    assert _pull(tmp_path).returncode == 0 and docker.calls == [("GET", TAG)]


@pytest.mark.parametrize("stream, pulled", [
    ([{"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown: manifest unknown"}], {MIRRORED}),
    (STREAM, set()),  # docker said nothing wrong, yet has no image answering to the digest
])
def test_a_failed_pull_tags_nothing(engine, tmp_path, stream, pulled):
    docker = engine(stream=stream, pulled=pulled)
    run = _pull(tmp_path)
    assert run.returncode != 0 and run.stderr.strip().splitlines()[-1].startswith("image-pull: "), run.stderr
    assert not [c for c in docker.calls if c[0] == "TAG"] and TAG not in docker.images


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
