"""A Spark's own drain through the REAL engine: HAProxy in front of two trtllm-serve stand-ins, each behind a relay
on an address of its own (what the Spark's filtering socket is) and with the REAL readiness agent. The host job's
drain (gateway/host/drain.py, as the host tool runs it before a restart) takes a Spark out of the pool while a stream runs
on it: the stream finishes whole, new requests go to the other Spark, and the drain returns once the stream is
done. After a passed gate the Spark is back in the pool."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from specfleet.gateway.host import drain
from specfleet.host.layout import Layout
from specfleet.serving.host import specfleet_host as sfh
from tests.unit.installed import installed
from tests.unit.test_bench import EAGLE_MODEL, free_port, standin  # noqa: F401 (fixture: stand-ins served locally)
from tests.unit.test_gateway_files import HAPROXY, KEY, _admin, _call, _write

AGENT = installed() / "gateway_agent.py"
RID = "r-aaaaaaaaaaaa"


class Relay:
    """TCP relay address -> the stand-in (a stand-in for systemd-socket-proxyd behind the Spark's filtering
    socket); counts the completions it relayed (`posts`; the health checks are GETs)."""

    def __init__(self, listen: tuple[str, int], to: tuple[str, int]):
        self.to, self.posts = to, 0
        self.sock = socket.create_server(listen)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket):
        with client, socket.create_connection(self.to) as server:
            peers = {client: server, server: client}
            while True:
                ready, _, _ = select.select(list(peers), [], [], 30)
                if not ready:
                    return
                for s in ready:
                    try:
                        data = s.recv(65536)
                        if s is client and data.startswith(b"POST "):
                            self.posts += 1
                        if data:
                            peers[s].sendall(data)
                    except OSError:  # a side reset (HAProxy closes its server connection after each response)
                        data = b""
                    if not data:
                        return

    def close(self):
        self.sock.close()


def _spark_dir(root: Path) -> Path:
    (root / "releases" / RID).mkdir(parents=True)
    (root / "releases" / RID / "release.json").write_text(json.dumps({"id": RID}))
    (root / "current").symlink_to(f"releases/{RID}")
    sfh.Host(str(root)).set_gate(RID, "passed")
    return root


def _status(tmp_path, server: str) -> str:
    return {r["server"]: r["status"] for r in _admin(tmp_path, "state")}[server]


def _wait(predicate, seconds: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < seconds, what
        time.sleep(0.05)
    return time.monotonic() - start


@pytest.fixture
def fleet(tmp_path, standin):  # noqa: F811
    urls = [standin(None), standin(None)]
    agent_port, api, metrics = free_port(), free_port(), free_port()
    sparks, procs, relays = {}, [], {}
    for i, url in enumerate(urls, 1):
        address, port = f"127.0.0.{i + 1}", free_port()
        relays[f"spark-0{i}"] = Relay((address, port), ("127.0.0.1", int(url.rsplit(":", 1)[1])))
        data = _spark_dir(tmp_path / f"spark-0{i}")
        procs.append(subprocess.Popen([sys.executable, str(AGENT), "--data-dir", str(data),
                                       "--listen", f"{address}:{agent_port}"]))
        sparks[f"spark-0{i}"] = (EAGLE_MODEL, f"{address}:{port}")
    lay = _write(tmp_path, sparks, api, metrics, agent_port)
    procs.append(subprocess.Popen([HAPROXY, "-db", "-f", lay.config], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    try:
        # HAProxy's runtime API socket appears once it has started (later on a loaded machine)
        _wait(lambda: Path(tmp_path / "admin.sock").exists(), 30, "HAProxy's runtime API")
        _wait(lambda: all(_status(tmp_path, s).startswith("UP") for s in sparks), 30, "both Sparks in the pool")
        yield f"http://127.0.0.1:{api}", sparks, relays
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        for r in relays.values():
            r.close()


def test_a_spark_drains_itself_while_a_stream_runs_on_it(fleet, tmp_path):
    api, sparks, relays = fleet
    for _ in range(4):  # both Sparks have served requests (an idle kept-alive server connection would count)
        assert _call(api + "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": 2})[0] == 200
    before = {name: r.posts for name, r in relays.items()}
    body = {"model": EAGLE_MODEL, "prompt": "hello", "max_tokens": 250, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(api + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    stream = urllib.request.urlopen(req, timeout=60)
    events = [stream.readline()]
    busy = next(name for name, r in relays.items() if r.posts > before[name])
    other = next(name for name in relays if name != busy)
    reader = threading.Thread(target=lambda: events.extend(line for line in stream if line.startswith(b"data: ")))
    reader.start()

    # the host job: gate `running` (the agent says down from here), then the drain
    data = tmp_path / busy
    since = time.time()
    sfh.Host(str(data)).set_gate(RID, "running")
    said: list[str] = []
    gw = {"gateways": ["127.0.0.1"], "backend_port": int(sparks[busy][1].rsplit(":", 1)[1]), "check_inter_ms": 500,
          "drain_timeout_sec": 20}
    result = drain.drain(gw, Layout(str(data)).agent_acks, since, lambda *lines, err=False: said.extend(lines))
    stream_done = events[-1].strip() == b"data: [DONE]"
    reader.join(timeout=60)
    stream.close()
    print("\n  " + "\n  ".join(said))
    assert result["unacknowledged"] == [] and result["left_in_flight"] == 0, (result, said)
    assert stream_done, "the drain returned before the stream on the Spark finished"
    assert _status(tmp_path, busy).startswith("DOWN"), _status(tmp_path, busy)
    posts = {name: r.posts for name, r in relays.items()}
    for _ in range(4):  # out of the pool: new requests go to the other Spark
        assert _call(api + "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": 2})[0] == 200
    assert relays[busy].posts == posts[busy] and relays[other].posts == posts[other] + 4

    # the restarted container passed its gate: back in the pool within a check interval or two
    sfh.Host(str(data)).set_gate(RID, "passed")
    back = _wait(lambda: _status(tmp_path, busy).startswith("UP"), 10, "back in the pool after its gate")
    print(f"  gateway: {busy} back in the pool {back:.2f} s after its gate passed (agent-inter 0.5 s)")
