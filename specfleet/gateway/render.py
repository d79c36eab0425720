"""The fleet's gateway as files (pure): HAProxy's config, the model -> backend map and the API-key map, rendered
from a gateway host's settings and the Sparks it fronts. One backend per model; every Spark serving that model
is a server in it, checked by /health and by its readiness agent. The paths on the gateway host are
host/layout.py's GatewayLayout; the deploy that writes them, drains and reloads is gateway/steps/gateways.py.

HAProxy's `hex` prints upper-case digits, so the key map stores upper-case SHA-256 digests: a client's bearer
token is hashed by HAProxy per request and looked up there (the file never holds a key)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from ..fleet.programs import program_text
from ..fleet.settings import Settings
from ..fleet.templating import ENV, systemd_args, systemd_word
from ..host.layout import UNIT_DIR, GatewayLayout, Layout
from .keys import gateway_secrets

HARD_STOP_MARGIN_SEC = 60  # beyond gateway_timeout_sec, before an old worker's connections are cut after a reload
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
MODELS_LUA = program_text("gateway_models.lua")  # GET /v1/models


@dataclass(frozen=True)
class Server:
    name: str  # the Spark's inventory name (HAProxy's server name)
    address: str  # host:port the gateways reach its filtering socket at
    agent_port: int  # the port of its readiness agent (on the same address)
    metrics_path: str = ""  # its engine's metrics, relayed at /sparks/<name>/metrics on the metrics port ("": none)


@dataclass(frozen=True)
class Backend:
    model: str  # what clients ask for: the `model` field, or /models/<model>/...
    name: str  # HAProxy's backend name
    servers: tuple[Server, ...]


@dataclass(frozen=True)
class GatewayOptions:
    """The gateway's tunables (validated settings of the gateway host)."""

    listen: str  # address:port of the API
    metrics_listen: str  # address:port of /metrics (Prometheus) and the health path
    health_path: str
    tls: bool
    timeout_sec: int
    queue_timeout_sec: int
    drain_timeout_sec: int
    check_inter_ms: int
    check_fall: int
    check_rise: int
    maxconn: int  # requests one Spark runs at once; the rest queue in HAProxy (leastconn picks the least busy)


def leave_bound_sec(check_inter_ms: int, check_fall: int) -> float:
    """The longest a Spark that failed (or went down mid-restart) stays in a gateway's pool: `fall` health checks
    in a row must fail, the first one up to an interval after the failure, each taking up to `timeout check`
    (= the interval): inter + T + (fall - 1) * (fastinter + T), with fastinter = T = inter. A restart by specfleet
    is quicker: the Spark's agent says down first, seen within inter + T."""
    return 2 * check_fall * check_inter_ms / 1000


def server_name(spark: str) -> str:
    """A Spark's server name in HAProxy (its inventory name, characters HAProxy does not take replaced)."""
    return _SAFE_NAME.sub("_", spark)


def backends(sparks: dict[str, Any]) -> list[Backend]:
    """Spark name -> (model, host:port, agent port[, metrics path]) as one backend per model, in the order models
    first appear."""
    by_model: dict[str, list[Server]] = {}
    for name, (model, address, agent_port, *metrics) in sparks.items():
        by_model.setdefault(model, []).append(Server(server_name(name), address, int(agent_port), *metrics))
    return [Backend(model, f"model_{i}_{_SAFE_NAME.sub('_', model)}", tuple(servers))
            for i, (model, servers) in enumerate(by_model.items(), 1)]


def models_map(bes: list[Backend]) -> str:
    return "".join(f"{be.model} {be.name}\n" for be in bes)


def paths_map(bes: list[Backend]) -> str:
    """/models/<model>/v1/ -> backend (matched as a prefix of the request path)."""
    return "".join(f"/models/{be.model}/v1/ {be.name}\n" for be in bes)


def key_digest(key: str) -> str:
    """What HAProxy's `http_auth_bearer,sha2(256),hex` computes from a bearer token."""
    return hashlib.sha256(key.encode()).hexdigest().upper()


def keys_map(keys: dict[str, str]) -> str:
    """Key name -> key as HAProxy's map: digest -> name (sorted: the file changes only when the keys do)."""
    return "".join(f"{key_digest(key)} {name}\n" for name, key in sorted(keys.items(), key=lambda kv: kv[1]))


def haproxy_cfg(o: GatewayOptions, bes: list[Backend], layout: GatewayLayout = GatewayLayout()) -> str:
    return ENV.get_template("haproxy.cfg.j2").render(
        admin_socket=layout.admin_socket, state_file=layout.state_file, models_lua=layout.models_lua,
        models_map=layout.models_map, paths_map=layout.paths_map, keys_map=layout.keys_map,
        # an old worker after a reload serves its streams to their end (a generation's longest silence, and then some)
        hard_stop_after=f"{o.timeout_sec + HARD_STOP_MARGIN_SEC}s",
        timeout=f"{o.timeout_sec}s", queue_timeout=f"{o.queue_timeout_sec}s", listen=o.listen,
        tls=f" ssl crt {layout.tls_pem}" if o.tls else "", health_path=o.health_path, backends=bes,
        inter=f"{o.check_inter_ms}ms", fall=o.check_fall, rise=o.check_rise,
        maxconn=o.maxconn, metrics_listen=o.metrics_listen,
        relayed=[s for be in bes for s in be.servers if s.metrics_path])


def gateway_files(o: GatewayOptions, bes: list[Backend], keys: dict[str, str],
                  layout: GatewayLayout = GatewayLayout()) -> dict[str, str]:
    """Host path -> content of every file the gateway deploy writes (the key map and TLS pem are root-only)."""
    return {layout.config: haproxy_cfg(o, bes, layout), layout.models_map: models_map(bes),
            layout.paths_map: paths_map(bes),
            layout.keys_map: keys_map(keys), layout.models_lua: MODELS_LUA}


def secret_paths(layout: GatewayLayout) -> frozenset[str]:
    """The gateway files only root may read (0600): the API-key map and the TLS pair."""
    return frozenset({layout.keys_map, layout.tls_pem})


def gateway_host_files(s: Settings, layout: GatewayLayout) -> tuple[dict[str, str], int, list[str]]:
    """(path -> content of every file of a gateway host, number of keys, problems), from its settings and the keys and
    TLS pair read on the controller (keys.gateway_secrets; a problem names the source, never a key)."""
    keys, pem, problems = gateway_secrets(s)
    if problems:
        return {}, 0, problems
    files = gateway_files(gateway_options(s), backends(s.gateway_backends), keys, layout)
    if pem is not None:
        files[layout.tls_pem] = pem
    return files, len(keys), []


def gateway_options(s: Settings) -> GatewayOptions:
    """A gateway host's tunables, from its validated settings."""
    return GatewayOptions(
        listen=_listen(s.gateway_bind, s.gateway_port), metrics_listen=_listen(s.gateway_bind, s.gateway_metrics_port),
        health_path=s.gateway_health_path, tls=s.gateway_tls_cert_file is not None, timeout_sec=s.gateway_timeout_sec,
        queue_timeout_sec=s.gateway_queue_timeout_sec, drain_timeout_sec=s.drain_timeout_sec,
        check_inter_ms=s.gateway_check_inter_ms, check_fall=s.gateway_check_fall, check_rise=s.gateway_check_rise,
        maxconn=s.gateway_server_maxconn)


def _listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def spark_paths(s: Settings) -> tuple[str, ...]:
    """Where spark_files writes, with or without gateways (what a cleanup or a fleet that dropped its gateway
    group removes): the four units, the start-marker drop-in, then gateways.json."""
    service, layout = s.unit_base, Layout.of(s)
    return (*(f"{UNIT_DIR}/{service}-{kind}" for kind in ("gateway.socket", "gateway.service", "agent.socket",
                                                           "agent.service")),
            layout.start_marker_dropin, layout.gateways_file)


def spark_listens(s: Settings) -> dict[str, str]:
    """Each gateway-facing socket unit of a Spark and the address it listens on, as `systemctl show -p Listen`
    prints it: a changed socket unit restarts only when this changed (gateway/steps/behind.py)."""
    return {f"{s.unit_base}-{kind}.socket": f"{_listen('0.0.0.0', port)} (Stream)"
            for kind, port in (("gateway", s.gateway_backend_port), ("agent", s.gateway_agent_port))}


def spark_files(s: Settings) -> dict[str, str]:
    """What a Spark behind the fleet's gateways gets (none without gateways): a filtering socket on
    gateway_backend_port relaying to trtllm-serve on loopback, the readiness agent's socket and service, both
    admitting the gateways only; a drop-in that marks every start of trtllm-serve for the agent (the release's unit
    itself stays as without gateways); and gateways.json, what the host tool's drain needs (gateway/host/drain.py)."""
    if not s.gateways:
        return {}
    layout, allowed = Layout.of(s), " ".join(s.gateways)
    service, backend, agent = s.unit_base, s.gateway_backend_port, s.gateway_agent_port
    return {
        f"{UNIT_DIR}/{service}-gateway.socket": ENV.get_template("spark-gateway.socket.j2").render(
            port=backend, listen=_listen("0.0.0.0", backend), gateways=allowed),
        f"{UNIT_DIR}/{service}-gateway.service": ENV.get_template("spark-gateway.service.j2").render(
            name=service, serve=f"127.0.0.1:{s.serve_port}"),
        f"{UNIT_DIR}/{service}-agent.socket": ENV.get_template("spark-agent.socket.j2").render(
            port=agent, listen=_listen("0.0.0.0", agent), gateways=allowed),
        f"{UNIT_DIR}/{service}-agent.service": ENV.get_template("spark-agent.service.j2").render(
            name=service, agent_dir=systemd_word(layout.agent_dir),
            exec_start=systemd_args(["/usr/bin/python3", "-I", layout.agent_tool, "--data-dir", layout.data_dir])),
        layout.start_marker_dropin: ENV.get_template("spark-start-marker.conf.j2").render(
            name=s.serving_unit, marker=systemd_word(layout.started_marker)),
        layout.gateways_file: json.dumps({"gateways": s.gateways, "backend_port": backend,
                                          "check_inter_ms": s.gateway_check_inter_ms,
                                          "drain_timeout_sec": s.drain_timeout_sec}, indent=1) + "\n",
    }


def check_config(config: str, renamed: dict[str, str]) -> str:
    """The config HAProxy checks before new files replace old ones: `config` naming each file of `renamed`
    (path -> where its new version waits) at its new place."""
    for path, new in renamed.items():
        config = config.replace(path, new)
    return config
