"""No client credential reaches a Spark through any of the gateway's frontends: the rendered config run in the real
HAProxy in front of two trtllm-serve stand-ins and a vLLM stand-in (whose engine metrics the metrics port relays),
every credential header a client may send through every route each frontend has, and what the stand-ins logged.

The frontends and their routes come from the rendered files themselves (the config's `frontend` sections, the model
and path maps, the relay's `use_backend` lines), and every backend that holds a Spark must have been reached: a
frontend, or a backend holding a Spark, added to the template without being exercised here fails this test."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from specfleet.gateway.host.haproxy_admin import ask
from specfleet.gateway.render import backends, gateway_files
from specfleet.host.layout import GatewayLayout
from tests.unit.test_bench import EAGLE_MODEL, free_port, standin  # noqa: F401 (fixture: stand-ins served locally)
from tests.unit.test_gateway_files import CREDENTIALS, HAPROXY, KEY, OTHER, _Agent, _options
from tests.vm.standin_common.standin_credentials import CREDENTIALS_SEEN
from tests.vm.test_trtllm_standin import _fake_hf_model
from tests.vm.test_vllm_standin import Served, spark_meminfo

Route = tuple[str, str, dict | None]  # method, URL, JSON body


def sections(config: str) -> dict[tuple[str, str], list[str]]:
    """(kind, name) -> the lines of each `frontend` and `backend` section of an HAProxy config."""
    out: dict[tuple[str, str], list[str]] = {}
    current: list[str] = []
    for line in config.splitlines():
        if m := re.match(r"(frontend|backend|defaults|global)\b\s*(\S*)", line):
            current = out.setdefault((m[1], m[2]), [])
        elif line.strip() and not line.lstrip().startswith("#"):
            current.append(line.strip())
    return {key: lines for key, lines in out.items() if key[0] in ("frontend", "backend")}


def _base(lines: list[str]) -> str:
    [bind] = [line.split()[1] for line in lines if line.startswith("bind ")]
    return f"http://{bind}"


def api_routes(lines: list[str], lay: GatewayLayout) -> list[Route]:
    """The inference frontend's two routes to each model: by the body's `model`, and by /models/<model>/v1/..."""
    base, routes = _base(lines), []
    for line in Path(lay.models_map).read_text().splitlines():
        model = line.split()[0]
        routes.append(("POST", base + "/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 4}))
    for line in Path(lay.paths_map).read_text().splitlines():
        prefix = line.split()[0]  # /models/<model>/v1/
        routes.append(("POST", base + prefix + "chat/completions",
                       {"model": prefix.split("/", 2)[2].rsplit("/v1/", 1)[0],
                        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}))
    return routes


def relay_routes(lines: list[str], lay: GatewayLayout) -> list[Route]:
    """The metrics frontend's relays: each `use_backend ... if METH_GET { path /sparks/<spark>/metrics }`."""
    base = _base(lines)
    return [("GET", base + m[1], None) for line in lines if (m := re.match(r"use_backend \S+ if METH_GET "
                                                                           r"\{ path (\S+) \}$", line))]


ROUTES: dict[str, Callable[[list[str], GatewayLayout], list[Route]]] = {
    "specfleet_api": api_routes, "specfleet_metrics": relay_routes}


def _send(method: str, url: str, body: dict | None, headers: dict) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={**({"Content-Type": "application/json"} if data else {}), **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _sessions_per_backend(admin_socket: str) -> dict[str, int]:
    """`show stat`: each backend's total sessions (requests sent to it; HAProxy's own checks are not sessions)."""
    rows = csv.DictReader(io.StringIO(ask(admin_socket, "show stat").lstrip("# ")))
    return {r["pxname"]: int(r["stot"] or 0) for r in rows if r["svname"] == "BACKEND"}


@pytest.fixture
def vllm_spark(tmp_path, standin):  # noqa: F811
    """A vLLM stand-in serving OTHER from the Hugging Face cache the trtllm-serve stand-ins read."""
    _fake_hf_model(tmp_path / "hf" / "hub", OTHER, ["model.safetensors"], "b" * 40)
    behaviour = tmp_path / "vllm-behaviour.json"
    behaviour.write_text(json.dumps({"step_ms": 1, "meminfo": str(spark_meminfo(tmp_path / "meminfo"))}))
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1",
           "VLLM_STANDIN_BEHAVIOUR": str(behaviour)}
    spark = Served({"env": env}, ["serve", OTHER, "--served-model-name", OTHER, "--host", "127.0.0.1"])
    yield spark
    spark.close()


def test_no_client_credential_reaches_a_spark_through_any_frontend_or_route(tmp_path, standin, vllm_spark):  # noqa: F811
    """Each credential header a client may send (CREDENTIALS), through each route of each frontend the rendered
    config has, reaches no Spark: the stand-ins log the name of every credential-like header they receive (never
    its value), and a request sent to each directly shows that they would."""
    trt = [standin(None).split("//")[1], standin(None).split("//")[1]]
    api, metrics, agent_port = free_port(), free_port(), free_port()
    agent = _Agent(agent_port)
    threading.Thread(target=agent.serve_forever, daemon=True).start()
    lay = GatewayLayout(str(tmp_path), admin_socket=str(tmp_path / "admin.sock"), state_file=str(tmp_path / "state"))
    bes = backends({"spark-01": (EAGLE_MODEL, trt[0], agent_port), "spark-02": (EAGLE_MODEL, trt[1], agent_port),
                    "spark-03": (OTHER, f"127.0.0.1:{vllm_spark.port}", agent_port, "/metrics")})
    for path, text in gateway_files(_options(api, metrics, agent_port), bes, {"ci": KEY}, lay).items():
        Path(path).write_text(text)
    config = sections(Path(lay.config).read_text())
    frontends = {name for kind, name in config if kind == "frontend"}
    assert frontends == set(ROUTES), f"frontends this test sends no credential through: {frontends - set(ROUTES)}"
    routes = [r for name in sorted(frontends) for r in ROUTES[name](config["frontend", name], lay)]
    assert len(routes) == 2 * len(bes) + 1, routes  # two routes per model, one relayed Spark
    log = tmp_path / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([HAPROXY, "-db", "-f", lay.config], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:  # up, and every model's Spark in service (/v1/models lists only those)
            try:
                listed = json.loads(_send("GET", f"http://127.0.0.1:{api}/v1/models", None,
                                          {"Authorization": f"Bearer {KEY}"})[1])
                if sorted(m["id"] for m in listed["data"]) == sorted(be.model for be in bes):
                    break
            except (OSError, ValueError):
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        for method, url, body in routes:
            for _ in range(2):  # leastconn: both Sparks of a model get requests
                status, answer = _send(method, url, body, CREDENTIALS)
                assert status == 200 and (b'"choices"' in answer or b"vllm:" in answer), (url, status, answer)
        reached = _sessions_per_backend(lay.admin_socket)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        agent.shutdown()
    holding_a_spark = {name for (kind, name), lines in config.items()
                       if kind == "backend" and any(line.startswith("server ") for line in lines)}
    assert holding_a_spark and all(reached.get(be, 0) > 0 for be in holding_a_spark), (holding_a_spark, reached)
    # each stand-in logs a credential sent to it directly: the check below can fail
    for server in (*standin.servers, vllm_spark):
        assert _send("GET", f"http://127.0.0.1:{server.port}/health", None, {"x-api-key": "not-a-key"})[0] == 200
    trt_logs = [server.stop()[2] for server in standin.servers]
    vllm_spark.close()
    logs = {**{f"spark-0{i}": out for i, out in enumerate(trt_logs, 1)}, "spark-03": vllm_spark.proc.stderr.read()}
    seen = {spark: [line.split(CREDENTIALS_SEEN, 1)[1] for line in out.splitlines() if CREDENTIALS_SEEN in line]
            for spark, out in logs.items()}
    assert seen == {spark: [": x-api-key (values not logged) on GET /health"] for spark in logs}, seen
    assert all(KEY not in out and "not-a-key" not in out for out in logs.values())
    print(f"\n  gateway: {len(routes)} routes of {len(frontends)} frontends, 2 requests each with "
          f"{len(CREDENTIALS)} credential headers ({', '.join(sorted(CREDENTIALS))}): none reached a Spark")
