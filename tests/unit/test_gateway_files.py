"""The gateway's HAProxy files: checked by HAProxy itself (`haproxy -c`), then run for real on loopback in front
of two trtllm-serve stand-ins with a readiness agent stub: API keys (401 without one, hashed in the map), routing
by the `model` field and by /models/<model>/, unknown model 404, GET /v1/models listing only models with a Spark in
service, and a Spark whose agent says `down` leaving the pool within the bound the check settings give."""

from __future__ import annotations

import json
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specfleet.gateway.render import GatewayOptions, backends, gateway_files, key_digest, keys_map
from specfleet.host.layout import GatewayLayout
from tests.unit.installed import installed
from tests.unit.test_bench import EAGLE_MODEL, free_port, standin  # noqa: F401 (fixture: stand-ins served locally)
from tests.unit.test_fleet_metrics import dashboard_metrics
from tests.vm.standin_common.standin_credentials import CREDENTIALS_SEEN

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
KEY = "sk-specfleet-test-0123456789abcdef"
OTHER = "nvidia/Llama-3.3-70B-Instruct-FP4"


def _options(api: int, metrics: int, agent: int) -> GatewayOptions:
    return GatewayOptions(listen=f"127.0.0.1:{api}", metrics_listen=f"127.0.0.1:{metrics}", health_path="/healthz",
                          tls=False, timeout_sec=3600, queue_timeout_sec=30, drain_timeout_sec=60,
                          check_inter_ms=500, check_fall=2, check_rise=1, maxconn=2)


def _write(tmp_path, sparks: dict[str, tuple[str, str]], api: int, metrics: int, agent: int) -> GatewayLayout:
    lay = GatewayLayout(str(tmp_path), admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"))
    bes = backends({name: (model, address, agent) for name, (model, address) in sparks.items()})
    for path, text in gateway_files(_options(api, metrics, agent), bes, {"ci": KEY}, lay).items():
        (tmp_path / path.rsplit("/", 1)[1]).write_text(text)
    return lay


def test_the_key_map_holds_digests_never_keys(tmp_path):
    lay = _write(tmp_path, {"spark-01": (EAGLE_MODEL, "127.0.0.1:1")}, 1, 2, 3)
    text = Path(lay.keys_map).read_text()
    assert KEY not in text and text == f"{key_digest(KEY)} ci\n" and key_digest(KEY).isupper()


def test_haproxy_accepts_the_rendered_config(tmp_path):
    lay = _write(tmp_path, {"spark-01": (EAGLE_MODEL, "127.0.0.1:1"), "spark-02": (OTHER, "127.0.0.1:2")}, 1, 2, 3)
    proc = subprocess.run([HAPROXY, "-c", "-f", lay.config], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


class _Agent(socketserver.ThreadingTCPServer):
    """HAProxy's agent-check peer: answers one word per connection (what the host's agent will say)."""
    allow_reuse_address = True
    daemon_threads = True
    word = "up"

    def __init__(self, port: int):
        agent = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                self.request.sendall(f"{agent.word}\n".encode())
        super().__init__(("127.0.0.1", port), Handler)


def _call(url: str, body: dict | None = None, key: str | None = KEY):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body else None, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null"), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), {k.lower(): v for k, v in e.headers.items()}


def _models(api: str) -> list[str]:
    return [m["id"] for m in _call(api + "/v1/models")[1]["data"]]


@pytest.fixture
def gateway(tmp_path, standin):  # noqa: F811
    if not shutil.which("haproxy") and not shutil.which(HAPROXY):
        pytest.fail("haproxy is not installed: tests/install-deps.sh installs it")
    urls = [standin(None), standin(None)]
    api, metrics, agent_port = free_port(), free_port(), free_port()
    agent = _Agent(agent_port)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    sparks = {"spark-01": (EAGLE_MODEL, urls[0].split("//")[1]), "spark-02": (EAGLE_MODEL, urls[1].split("//")[1])}
    lay = _write(tmp_path, sparks, api, metrics, agent_port)
    proc = subprocess.Popen([HAPROXY, "-db", "-f", lay.config], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{api}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", api), timeout=1):
                break
        except OSError:
            time.sleep(0.1)
    yield base, f"http://127.0.0.1:{metrics}", agent
    proc.terminate()
    proc.wait(timeout=30)
    agent.shutdown()


def test_keys_routing_and_models_through_the_real_engine(gateway):
    api, metrics, _ = gateway
    status, body, headers = _call(api + "/v1/models", key=None)
    assert status == 401 and headers.get("www-authenticate") == "Bearer" and body["error"]["code"] == 401
    assert _call(api + "/v1/models", key=KEY + "x")[0] == 401
    assert _models(api) == [EAGLE_MODEL]
    status, body, _ = _call(api + f"/v1/models/{EAGLE_MODEL}")  # the openai package's models.retrieve()
    assert status == 200 and body == {"id": EAGLE_MODEL, "object": "model", "owned_by": "specfleet"}, body
    status, body, _ = _call(api + "/v1/models/no/such-model")
    assert status == 404 and body["error"]["code"] == 404, body
    assert _call(api + f"/v1/models/{EAGLE_MODEL}", key=None)[0] == 401
    prompt = {"model": EAGLE_MODEL, "prompt": "hello", "max_tokens": 4}
    status, body, _ = _call(api + "/v1/completions", prompt)
    assert status == 200 and body["choices"][0]["text"], body
    status, body, _ = _call(api + f"/models/{EAGLE_MODEL}/v1/completions", {"prompt": "hi", "max_tokens": 4})
    assert status == 200 and body["choices"][0]["text"], body
    status, body, _ = _call(api + "/v1/completions", {**prompt, "model": "no/such-model"})
    assert status == 404 and "no such model" in body["error"]["message"]
    assert urllib.request.urlopen(api + "/healthz", timeout=10).status == 200  # no key needed for DNS/VIP checks
    text = urllib.request.urlopen(metrics + "/metrics", timeout=10).read().decode()
    assert 'haproxy_server_status{proxy="model_1_' in text


# what clients of OpenAI-compatible APIs send their key in: OpenAI's SDK (Authorization: Bearer), Azure OpenAI's
# (api-key), Anthropic-style and LiteLLM clients (x-api-key), Gemini's OpenAI layer (x-goog-api-key), a proxy's, and
# a browser's cookies (tests/unit/test_gateway_credentials.py sends each through every frontend and route)
CREDENTIALS = {"Authorization": f"Bearer {KEY}", "api-key": KEY, "x-api-key": KEY, "x-goog-api-key": KEY,
               "Proxy-Authorization": "Basic c3Bhcms6c2VjcmV0", "Cookie": f"session={KEY}"}


def _post(url: str, body: dict, headers: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def test_a_spark_whose_agent_says_down_leaves_within_the_bound(gateway):
    api, _, agent = gateway
    assert _models(api) == [EAGLE_MODEL]
    agent.word = "down"
    start = time.monotonic()
    bound = 0.5 + 0.5 + 1.0  # agent-inter, one more check, slack for a loaded machine
    while _models(api) and time.monotonic() - start < 30:
        time.sleep(0.05)
    left = time.monotonic() - start
    print(f"\n  gateway: Sparks left the pool {left:.2f} s after their agent said down (bound {bound:.1f} s)")
    assert _models(api) == [] and left <= bound
    status, body, _ = _call(api + "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": 2})
    assert status == 503 and body["error"]["code"] == 503, (status, body)
    agent.word = "up"
    deadline = time.monotonic() + 10
    while not _models(api) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _models(api) == [EAGLE_MODEL]


def test_the_spark_units_admit_the_gateways_only_and_systemd_accepts_them(tmp_path):
    from specfleet.gateway.render import spark_files
    from tests.unit.fakehost import make_plans
    fleet = {"gw-1": {"ssh_hostname": "10.88.0.10"}, "gw-2": {"ssh_hostname": "10.88.0.11"},
             "spark": {"ssh_hostname": "10.88.0.1", "serves": "eagle3", "service_name": "specfleet-trtllm"}}
    plan = make_plans(fleet, "eagle3", groups={"gateway": ["gw-1", "gw-2"]})["spark"]
    files = spark_files(plan.settings)
    gateways_json = json.loads(files.pop("/var/lib/specfleet/gateways.json"))
    assert gateways_json == {"gateways": ["10.88.0.10", "10.88.0.11"], "backend_port": 8001, "check_inter_ms": 2000,
                             "drain_timeout_sec": 600}
    agent = files["/etc/systemd/system/specfleet-trtllm-agent.service"]
    assert "ReadWritePaths=/var/lib/specfleet/agent" in agent
    assert "ExecStart=/usr/bin/python3 -I /var/lib/specfleet/bin/gateway-agent --data-dir /var/lib/specfleet" in agent
    sock = files["/etc/systemd/system/specfleet-trtllm-gateway.socket"]
    assert "ListenStream=0.0.0.0:8001" in sock and "IPAddressDeny=any" in sock
    assert "IPAddressAllow=10.88.0.10 10.88.0.11" in sock
    assert "systemd-socket-proxyd --connections-max=1024 127.0.0.1:8000" in files[
        "/etc/systemd/system/specfleet-trtllm-gateway.service"]
    assert "IPAddressAllow=10.88.0.10 10.88.0.11" in files["/etc/systemd/system/specfleet-trtllm-agent.socket"]
    # the start marker's drop-in, verified with the unit it extends (the release's, as without gateways)
    dropin = files.pop("/etc/systemd/system/specfleet-trtllm.service.d/specfleet-start-marker.conf")
    (tmp_path / "specfleet-trtllm.service.d").mkdir()
    (tmp_path / "specfleet-trtllm.service.d" / "specfleet-start-marker.conf").write_text(dropin)
    files["/etc/systemd/system/specfleet-trtllm.service"] = plan.rendered.unit
    for path, text in files.items():
        (tmp_path / path.rsplit("/", 1)[1]).write_text(text)
    units = sorted(str(p) for p in tmp_path.iterdir() if p.is_file())
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True, timeout=60)
    problems = [line for line in (proc.stdout + proc.stderr).splitlines()
                if "specfleet-trtllm" in line and "not found" not in line.lower() and "Failed to" not in line
                and "/usr/bin/docker is not executable" not in line  # no docker on the controller
                and "/bin/drop-caches is not executable" not in line]  # nor the host's programs
    assert not problems, proc.stdout + proc.stderr


def test_a_revoked_key_is_refused_on_the_next_request_of_a_kept_alive_connection(gateway, tmp_path):
    """Revoking is the key map's file rewritten, then synced into the running HAProxy (haproxy_admin.py sync-map: one
    transaction): the rule runs per request, so a connection opened with the key is refused on its next request,
    while a new key works at once, and no reload happened."""
    import http.client
    api, _, _ = gateway
    host, port = api.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    conn.request("GET", "/v1/models", headers=headers)
    first = conn.getresponse()
    first.read()
    assert first.status == 200 and not first.will_close
    new_key = "sk-specfleet-test-new-key-456789"
    (tmp_path / "specfleet-keys.map").write_text(keys_map({"new": new_key}))  # KEY revoked, another added
    synced = _admin(tmp_path, "sync-map", str(tmp_path / "specfleet-keys.map"))
    assert synced["entries"] == 1, synced
    conn.request("GET", "/v1/models", headers=headers)
    second = conn.getresponse()
    second.read()
    assert second.status == 401
    conn.close()
    assert _call(api + "/v1/models", key=new_key)[0] == 200


def test_a_stream_passes_unbuffered(gateway):
    """The events of a 200-token stream (12 ms a token at the stand-in) reach the client spread over the
    generation, not at its end: a buffering proxy would hand them over at once."""
    api, _, _ = gateway
    body = {"model": EAGLE_MODEL, "prompt": "hello", "max_tokens": 200, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(api + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    arrivals = []
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.headers.get("Content-Type", "").startswith("text/event-stream")
        for line in r:
            if line.startswith(b"data: "):
                arrivals.append((time.monotonic(), line.strip() == b"data: [DONE]"))
    assert arrivals[-1][1] and len(arrivals) > 100, len(arrivals)
    spread = arrivals[-1][0] - arrivals[0][0]
    print(f"\n  gateway: {len(arrivals)} stream events over {spread:.2f} s (generation at the stand-in: >= 2.4 s)")
    assert spread >= 1.2, spread


def _admin(tmp_path, *args: str) -> dict | list:
    tool = installed() / "haproxy_admin.py"
    out = subprocess.run([sys.executable, str(tool), "--socket", str(tmp_path / "admin.sock"), *args],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)


def test_a_drain_lets_a_running_stream_finish_and_sends_new_requests_elsewhere(gateway, tmp_path):
    api, _, _ = gateway
    body = {"model": EAGLE_MODEL, "prompt": "hello", "max_tokens": 250, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(api + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    events: list[bytes] = []
    stream = urllib.request.urlopen(req, timeout=60)
    events.append(stream.readline())  # the stream runs: one server holds it
    busy = [r for r in _admin(tmp_path, "state") if r["sessions"]]
    assert len(busy) == 1, busy
    reader = threading.Thread(target=lambda: events.extend(line for line in stream if line.startswith(b"data: ")))
    reader.start()
    result = _admin(tmp_path, "drain", busy[0]["server"], "--timeout", "60")
    reader.join(timeout=60)
    assert result["drained"] and result["left"] == 0 and result["waited_s"] > 0.5, result
    assert events[-1].strip() == b"data: [DONE]", events[-3:]  # the stream finished whole
    states = {r["server"]: r["status"] for r in _admin(tmp_path, "state")}
    assert states[busy[0]["server"]].startswith("DRAIN"), states
    for _ in range(4):  # new requests all go to the other Spark
        assert _call(api + "/v1/completions", {"model": EAGLE_MODEL, "prompt": "x", "max_tokens": 2})[0] == 200
    after = {r["server"]: r for r in _admin(tmp_path, "state")}
    assert _admin(tmp_path, "ready", busy[0]["server"])["backends"]
    assert {r["server"]: r["status"] for r in _admin(tmp_path, "state")}[busy[0]["server"]].startswith("UP")
    print(f"\n  gateway: drain of {busy[0]['server']} waited {result['waited_s']} s for its stream; "
          f"state after: {after[busy[0]['server']]['status']}")


def test_new_files_are_proven_by_haproxy_before_they_replace_the_old_ones(tmp_path):
    """What the gateway deploy runs before installing changed files (gateway/steps/gateways.py): `haproxy -c` on the config
    naming the new files. A broken new TLS pair fails the check (the old files stay); a good one passes."""
    from specfleet.gateway.render import check_config

    lay = GatewayLayout(str(tmp_path), admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"))
    opts = GatewayOptions(**{**_options(1, 2, 3).__dict__, "tls": True})
    files = gateway_files(opts, backends({"spark-01": (EAGLE_MODEL, "127.0.0.1:1", 3)}), {"ci": KEY}, lay)
    for path, text in files.items():
        Path(path).write_text(text)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=gw",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "c.pem")], check=True,
                   capture_output=True, timeout=60)
    good = (tmp_path / "c.pem").read_text() + (tmp_path / "k.pem").read_text()
    Path(lay.tls_pem).write_text(good)  # the pair in use
    new = f"{lay.tls_pem}.specfleet-new"
    check = tmp_path / "haproxy.cfg.specfleet-check"
    check.write_text(check_config(files[lay.config], {lay.tls_pem: new}))
    Path(new).write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    bad = subprocess.run([HAPROXY, "-c", "-q", "-f", str(check)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0, "haproxy accepted a broken certificate"
    ok = subprocess.run([HAPROXY, "-c", "-q", "-f", lay.config], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr  # the files in use are untouched and still good
    Path(new).write_text(good)
    assert subprocess.run([HAPROXY, "-c", "-q", "-f", str(check)], timeout=60).returncode == 0


def _pair(tmp_path, name: str) -> tuple[str, bytes]:
    """A self-signed certificate and its key as one PEM (what the gateway deploy installs), and the certificate's
    DER (what a client sees)."""
    import ssl
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", str(tmp_path / f"{name}.key"), "-out", str(tmp_path / f"{name}.crt")], check=True,
                   capture_output=True, timeout=60)
    cert = (tmp_path / f"{name}.crt").read_text()
    return cert + (tmp_path / f"{name}.key").read_text(), ssl.PEM_cert_to_DER_cert(cert)


def _long_stream(conn, headers: dict) -> tuple[list, threading.Event]:
    """A 1200-token stream started on `conn` and read in the background: ([the response, its events...], set once
    it ended). It runs when this returns (its first event came)."""
    body = {"model": EAGLE_MODEL, "prompt": "hello", "max_tokens": 1200, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {**headers, "Content-Type": "application/json"})
    events = [conn.getresponse()]
    assert events[0].status == 200 and events[0].readline().startswith(b"data: ")
    done = threading.Event()

    def read():
        events.extend(line for line in events[0] if line.startswith(b"data: "))
        done.set()
    threading.Thread(target=read, daemon=True).start()
    return events, done


def test_a_new_certificate_is_a_reload_that_keeps_a_running_stream_and_refuses_no_connection(tmp_path, standin):  # noqa: F811
    """Changing the TLS pair reloads HAProxy (master-worker, as the distribution's unit runs it: `systemctl reload` =
    SIGUSR2 to the master): a stream running through the old worker finishes whole, and every connection opened
    meanwhile is answered, by the old certificate until the new worker serves the new one."""
    import http.client
    import signal
    import ssl

    old_pem, old_der = _pair(tmp_path, "old")
    new_pem, new_der = _pair(tmp_path, "new")
    api, metrics, agent_port = free_port(), free_port(), free_port()
    agent = _Agent(agent_port)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    url = standin(None)
    lay = GatewayLayout(str(tmp_path), admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"))
    opts = GatewayOptions(**{**_options(api, metrics, agent_port).__dict__, "tls": True})
    for path, text in gateway_files(opts, backends({"spark-01": (EAGLE_MODEL, url.split("//")[1], agent_port)}),
                                    {"ci": KEY}, lay).items():
        Path(path).write_text(text)
    Path(lay.tls_pem).write_text(old_pem)
    master = subprocess.Popen([HAPROXY, "-W", "-db", "-f", lay.config], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    ctx = ssl._create_unverified_context()  # self-signed: the test compares the certificate itself

    try:
        deadline = time.monotonic() + 30
        while True:  # up, and the Spark in service (one check)
            try:
                if _https_models(api, ctx) == (old_der, [EAGLE_MODEL]):
                    break
            except (OSError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        events, done = _long_stream(http.client.HTTPSConnection("127.0.0.1", api, timeout=60, context=ctx),
                                    {"Authorization": f"Bearer {KEY}"})
        Path(lay.tls_pem).write_text(new_pem)
        master.send_signal(signal.SIGUSR2)
        answered, deadline = 0, time.monotonic() + 60
        while (der := _https_models(api, ctx)[0]) != new_der:  # every connection meanwhile answered (200)
            assert der == old_der and time.monotonic() < deadline, "the new certificate was never served"
            answered += 1
            time.sleep(0.05)
        reloaded_during_the_stream = not done.is_set()
        assert done.wait(60) and events[-1].strip() == b"data: [DONE]", events[-3:]  # finished whole
        assert reloaded_during_the_stream, "the stream ended before the new worker served: nothing was tested"
        print(f"\n  gateway reload: {answered} connections answered by the old certificate during the reload, "
              f"then the new one; the running stream finished whole ({len(events) - 1} events)")
    finally:
        master.terminate()
        master.wait(timeout=30)
        agent.shutdown()


def _https_models(api: int, ctx) -> tuple[bytes, list[str]]:
    """GET /v1/models over a new TLS connection: the certificate served and the models (asserting a 200)."""
    import http.client
    conn = http.client.HTTPSConnection("127.0.0.1", api, timeout=30, context=ctx)
    conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    der = conn.sock.getpeercert(binary_form=True)  # before the answer: a `Connection: close` one (an old worker
    resp = conn.getresponse()                      # finishing during a reload) leaves conn.sock None once read
    body = resp.read()
    conn.close()
    assert resp.status == 200, resp.status
    return der, [m["id"] for m in json.loads(body)["data"]]


def _worker_pid(admin_socket: str) -> int:
    """The PID of the worker that serves the admin socket now (`show info`: a reload's new worker takes it over)."""
    from specfleet.gateway.host.haproxy_admin import ask
    info = dict(line.split(": ", 1) for line in ask(admin_socket, "show info").splitlines() if ": " in line)
    return int(info["Pid"])


def test_the_credential_rules_reach_a_running_gateway_as_a_reload(tmp_path, standin):  # noqa: F811
    """A gateway running a config that forwards the client's credentials takes the rendered one by a reload
    (master-worker, `systemctl reload` = SIGUSR2): a stream running through the old worker finishes whole, every
    connection opened meanwhile is answered, and from the new worker on no credential reaches the Spark. Requests
    before the reload go to /v1/completions, after it to /v1/chat/completions: the stand-in's log says which
    carried credentials."""
    import http.client
    import signal

    api, metrics, agent_port = free_port(), free_port(), free_port()
    agent = _Agent(agent_port)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    url = standin(None)
    lay = _write(tmp_path, {"spark-01": (EAGLE_MODEL, url.split("//")[1])}, api, metrics, agent_port)
    rendered = Path(lay.config).read_text()
    forwarding = "".join(line for line in rendered.splitlines(True) if "http-request del-header" not in line)
    assert forwarding != rendered
    Path(lay.config).write_text(forwarding)
    master = subprocess.Popen([HAPROXY, "-W", "-db", "-f", lay.config], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{api}"
    completion = {"model": EAGLE_MODEL, "prompt": "hi", "max_tokens": 4}
    chat = {"model": EAGLE_MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    try:
        deadline = time.monotonic() + 30
        while True:  # up, and the Spark in service (one check)
            try:
                if _post(base + "/v1/completions", completion, CREDENTIALS)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the gateway never served"
            time.sleep(0.1)
        old = _worker_pid(lay.admin_socket)
        events, done = _long_stream(http.client.HTTPConnection("127.0.0.1", api, timeout=60), CREDENTIALS)
        Path(lay.config).write_text(rendered)
        master.send_signal(signal.SIGUSR2)
        answered, deadline = 0, time.monotonic() + 60
        while _worker_pid(lay.admin_socket) == old:  # every connection meanwhile answered (200, no refusal)
            assert _call(base + "/v1/models")[0] == 200 and time.monotonic() < deadline
            answered += 1
            time.sleep(0.05)
        reloaded_during_the_stream = not done.is_set()
        for _ in range(3):
            status, answer = _post(base + "/v1/chat/completions", chat, CREDENTIALS)
            assert status == 200 and answer["choices"][0], answer
        assert done.wait(60) and events[-1].strip() == b"data: [DONE]", events[-3:]  # finished whole
        assert reloaded_during_the_stream, "the stream ended before the new worker served: nothing was tested"
    finally:
        master.terminate()
        master.wait(timeout=30)
        agent.shutdown()
    out = standin.servers[0].stop()[2]
    seen = {line.rsplit(" on ", 1)[1] for line in out.splitlines() if CREDENTIALS_SEEN in line}
    chats = sum('"POST /v1/chat/completions' in line for line in out.splitlines())
    print(f"\n  gateway reload: {answered} connections answered during it; credentials seen before it on {seen}, "
          f"none on the {chats} requests after it; the running stream finished whole ({len(events) - 1} events)")
    assert seen == {"POST /v1/completions"} and chats == 3, (seen, chats)


def test_the_metrics_port_relays_a_sparks_engine_metrics_and_nothing_else(tmp_path):
    """GET /sparks/<name>/metrics on the metrics port reaches that Spark's engine metrics path (the gateways are the
    only clients its filtering socket admits); any other method or path, or a Spark whose metrics a read would
    consume (none relayed), reaches no Spark."""
    import http.server

    seen: list[tuple[str, str]] = []

    class Spark(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            seen.append((self.command, self.path))
            body = b'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 3.0\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    spark = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Spark)
    threading.Thread(target=spark.serve_forever, daemon=True).start()
    api, metrics, agent_port = free_port(), free_port(), free_port()
    lay = GatewayLayout(str(tmp_path), admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"))
    address = f"127.0.0.1:{spark.server_address[1]}"
    bes = backends({"spark-01": (EAGLE_MODEL, address, agent_port, "/metrics"),
                    "spark-02": (EAGLE_MODEL, address, agent_port, "")})
    for path, text in gateway_files(_options(api, metrics, agent_port), bes, {"ci": KEY}, lay).items():
        Path(path).write_text(text)
    assert subprocess.run([HAPROXY, "-c", "-q", "-f", lay.config], timeout=60).returncode == 0
    proc = subprocess.Popen([HAPROXY, "-db", "-f", lay.config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{metrics}"

    def status(path: str, method: str = "GET") -> int:
        try:
            return urllib.request.urlopen(urllib.request.Request(base + path, method=method, data=b"{}" if method ==
                                                                 "POST" else None), timeout=10).status
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                body = urllib.request.urlopen(base + "/sparks/spark-01/metrics?x=1", timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the gateway never relayed"
                time.sleep(0.1)
        relayed = lambda: [r for r in seen if r != ("GET", "/health")]  # noqa: E731 (the pool's checks are the API's)
        assert b"vllm:spec_decode_num_drafts_total" in body and relayed() == [("GET", "/metrics")]
        for path, method in (("/sparks/spark-01/metrics", "POST"), ("/sparks/spark-01/v1/completions", "POST"),
                             ("/sparks/spark-01/v1/models", "GET"), ("/sparks/spark-02/metrics", "GET")):
            assert status(path, method) == 503, (path, method)
        assert relayed() == [("GET", "/metrics")], "a request other than GET of a relayed Spark's metrics reached it"
        # the pool is the checked servers only: the relay is no pool member (status, drains and waits read the pool)
        pool = _admin(tmp_path, "state")
        assert {(r["backend"], r["server"]) for r in pool} == {
            (bes[0].name, "spark-01"), (bes[0].name, "spark-02")}, pool
        # the dashboard's HAProxy series are ones this HAProxy's exporter serves
        exported = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
        for name in dashboard_metrics("haproxy_"):
            assert f"\n{name}{{" in exported, name
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        spark.shutdown()
