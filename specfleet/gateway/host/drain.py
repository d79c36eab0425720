"""Draining a Spark behind the fleet's gateways before its serving container restarts (stdlib; installed next to
the host tool, which imports it; the readiness agent records the acknowledgements).

The host job sets the gate to `running` first, so the readiness agent answers `down` from then on, and every
gateway's next agent-check takes the host out of its pool (HAProxy marks a server DOWN on the agent's `down` at
once; requests already sent run on). Then:
1. wait until every gateway (`gateways.json`, written by the converge) has been answered `down` since then: the
   agent records, per peer address, when it last said `down` (`agent-acks.json`). Bounded: a gateway that does
   not ask within a few check intervals is down or cut off, and sends nothing;
2. wait until no connection is established on the gateway-facing port (HAProxy closes its server connection after
   each response: `option http-server-close`, so an established connection is a request in flight, streams
   included), bounded by drain_timeout_sec.
A host without `gateways.json` (a fleet without a gateway group) does none of this."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

ACK_INTERVALS = 3  # check intervals a gateway has to acknowledge before it counts as unreachable
ACK_SLACK_SEC = 2.0  # added to that bound (a loaded gateway's check scheduling)
GRACE_SEC = 0.5  # after the last acknowledgement: a request dispatched just before it has connected by then
POLL_SEC = 0.2
TCP_ESTABLISHED = "01"  # the state column of /proc/net/tcp
_ACK_LOCK = threading.Lock()


def read_gateways(path: str) -> dict | None:
    """{"gateways": [addresses], "backend_port": N, "check_inter_ms": N, "drain_timeout_sec": N}; None: no gateway."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def record_ack(path: str, peer: str, when: float | None = None) -> None:
    """The agent said `down` to `peer` (called by the agent; threads of one process share the lock)."""
    peer = peer.removeprefix("::ffff:")  # an IPv4 gateway on a dual-stack socket
    with _ACK_LOCK:
        acks = read_acks(path)
        acks[peer] = time.time() if when is None else when
        tmp = f"{path}.tmp"
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(tmp).write_text(json.dumps(acks) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def read_acks(path: str) -> dict[str, float]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def established(port: int, tables: tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")) -> int:
    """Connections established on local `port` (IPv4 and IPv6), read from the kernel's tables."""
    count = 0
    for table in tables:
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == TCP_ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def drain(gw: dict, acks_file: str, since: float, say: Callable[..., None],
          progress: Callable[..., None] = lambda **_: None, connections: Callable[[int], int] = established,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> dict:
    """Steps 1 and 2 above, reported to the job's progress file; returns what happened (for the job's log)."""
    start = clock()
    gateways = list(gw["gateways"])
    ack_bound = ACK_INTERVALS * gw["check_inter_ms"] / 1000 + ACK_SLACK_SEC
    while True:
        acks = read_acks(acks_file)
        missing = [g for g in gateways if acks.get(g, 0.0) < since]
        if not missing or clock() - start >= ack_bound:
            break
        progress(kind="drain", phase="gateways", elapsed=round(clock() - start, 1), timeout=gw["drain_timeout_sec"],
                 pending=len(missing))
        sleep(POLL_SEC)
    acked = len(gateways) - len(missing)
    say(f"drain: {acked} of {len(gateways)} gateway(s) took this host out of their pool in {clock() - start:.1f}s"
        + (f"; no answer from {', '.join(missing)} (unreachable: it sends nothing)" if missing else ""))
    sleep(GRACE_SEC)
    waited_from = clock()
    in_flight = connections(gw["backend_port"])
    if in_flight:
        say(f"drain: waiting for {in_flight} request(s) in flight (at most {gw['drain_timeout_sec']}s)")
    while in_flight and clock() - waited_from < gw["drain_timeout_sec"]:
        progress(kind="drain", phase="in flight", elapsed=round(clock() - start, 1), timeout=gw["drain_timeout_sec"],
                 pending=in_flight)
        sleep(POLL_SEC)
        in_flight = connections(gw["backend_port"])
    seconds = round(clock() - start, 2)
    if in_flight:
        say(f"drain: {in_flight} request(s) still in flight after drain_timeout_sec={gw['drain_timeout_sec']}; "
            "restarting anyway", err=True)
    else:
        say(f"drain: done in {seconds}s")
    return {"gateways": len(gateways), "unacknowledged": missing, "left_in_flight": in_flight, "seconds": seconds}


def before_restart(layout, since: float, skip: tuple, say: Callable[..., None],
                   progress: Callable[..., None] = lambda **_: None) -> str | None:
    """The drain of a host job about to restart a serving container (nothing without gateways.json). Returns why
    the restart must not happen: a gateway (not in `skip`, the addresses a rollout's --without-gateway names) did
    not take the host out of its pool, so it may still route here."""
    gw = read_gateways(layout.gateways_file)
    if gw is None:
        return None
    result = drain({**gw, "gateways": [g for g in gw["gateways"] if g not in skip]}, layout.agent_acks, since, say,
                   progress)
    if result["unacknowledged"]:
        return (f"drain: gateway(s) {', '.join(result['unacknowledged'])} did not take this host out of their pool "
                "(a gateway that is down: `specfleet rollout ... --without-gateway HOST`)")
    return None
