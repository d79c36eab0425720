"""A Spark's drain before its restart (gateway/host/drain.py): every gateway acknowledges, then the requests in flight
finish, each step bounded; with a simulated clock, so the bounds are exact and no test waits."""

from __future__ import annotations

import json

import pytest

from specfleet.gateway.host import drain
from specfleet.serving.host import specfleet_host as sfh
from tests.unit.test_host_tool import host  # noqa: F401 (fixture: a scratch host with systemctl simulated)

GW = {"gateways": ["10.0.0.1", "10.0.0.2"], "backend_port": 8001, "check_inter_ms": 2000, "drain_timeout_sec": 60}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        self.t += dt


def _run(tmp_path, acks_at: dict[str, float], in_flight: list[int], since: float = 100.0):
    """acks_at: gateway -> the clock time its agent-check hears `down`; in_flight: successive connection counts."""
    clock, said = Clock(), []
    acks = tmp_path / "acks.json"
    counts = iter(in_flight)
    last = [in_flight[-1]]

    def sleep(dt):
        clock.sleep(dt)
        for g, t in acks_at.items():
            if clock.t >= t:
                drain.record_ack(str(acks), g, when=since + t)

    def connections(port):
        assert port == GW["backend_port"]
        last[0] = next(counts, last[0])
        return last[0]

    result = drain.drain(GW, str(acks), since, lambda *lines, err=False: said.extend(lines),
                         connections=connections, clock=clock, sleep=sleep)
    return result, said, clock.t


def test_waits_for_every_gateway_then_for_the_requests_in_flight(tmp_path):
    result, said, t = _run(tmp_path, {"10.0.0.1": 0.5, "10.0.0.2": 1.9}, [2, 2, 1, 1, 0])
    assert result["unacknowledged"] == [] and result["left_in_flight"] == 0
    assert said[0].startswith("drain: 2 of 2 gateway(s) took this host out of their pool in 2.0s"), said
    assert "drain: waiting for 2 request(s) in flight (at most 60s)" in said and said[-1].startswith("drain: done in")
    assert t == pytest.approx(2.0 + drain.GRACE_SEC + 4 * drain.POLL_SEC)


def test_an_ack_from_before_the_drain_does_not_count(tmp_path):
    acks = tmp_path / "acks.json"
    acks.write_text(json.dumps({"10.0.0.1": 99.0, "10.0.0.2": 99.5}))  # said `down` before this drain began (100)
    result, said, t = _run(tmp_path, {"10.0.0.1": 0.2, "10.0.0.2": 0.4}, [0])
    assert result["unacknowledged"] == [] and "took this host out of their pool in 0.4s" in said[0], said


def test_a_gateway_that_never_asks_is_named_after_the_bound(tmp_path):
    result, said, t = _run(tmp_path, {"10.0.0.1": 0.3}, [0])
    bound = drain.ACK_INTERVALS * GW["check_inter_ms"] / 1000 + drain.ACK_SLACK_SEC
    assert result["unacknowledged"] == ["10.0.0.2"]
    assert said[0] == (f"drain: 1 of 2 gateway(s) took this host out of their pool in {bound:.1f}s; no answer from "
                       "10.0.0.2 (unreachable: it sends nothing)")
    assert t == pytest.approx(bound + drain.GRACE_SEC, abs=drain.POLL_SEC)


def test_requests_past_drain_timeout_restart_anyway(tmp_path):
    result, said, t = _run(tmp_path, {"10.0.0.1": 0.0, "10.0.0.2": 0.0}, [3])
    assert result["left_in_flight"] == 3 and "restarting anyway" in said[-1]
    # one poll until the acks are seen, the grace, then drain_timeout_sec of waiting
    assert t == pytest.approx(drain.POLL_SEC + drain.GRACE_SEC + GW["drain_timeout_sec"], abs=0.01)


def test_established_counts_connections_on_the_port_only(tmp_path):
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    rows = ["0: 0100007F:1F41 0100007F:D2F0 01 0:0 00:0 0 0 0 1", "1: 0100007F:1F41 00000000:0000 0A 0:0 00:0 0 0 0 1",
            "2: 0100007F:D2F0 0100007F:1F41 01 0:0 00:0 0 0 0 1", "3: 0100007F:1F40 0100007F:D2F1 01 0:0 00:0 0 0 0 1"]
    v4 = tmp_path / "tcp"
    v4.write_text(head + "\n".join(rows) + "\n")
    v6 = tmp_path / "tcp6"
    v6.write_text(head + "0: 00000000000000000000000001000000:1F41 00000000000000000000000001000000:D2F2 01 0:0 00:0 0 "
                         "0 0 1\n")
    # 8001 = 0x1F41: one established v4 (row 0; row 1 listens, row 2 is the client's end) + one v6
    assert drain.established(8001, (str(v4), str(v6), str(tmp_path / "missing"))) == 2
    assert drain.established(8000, (str(v4),)) == 1


# ---- in the host tool: drained before the restart, only behind gateways and only while serving ----------------
def _calls(host, monkeypatch, unacknowledged=()):  # noqa: F811
    seen = []

    def fake_drain(gw, acks, since, say, progress):
        seen.append(("drain", gw))
        return {"unacknowledged": [g for g in unacknowledged if g in gw["gateways"]]}
    monkeypatch.setattr(sfh.drain, "drain", fake_drain)
    original = host.system.sh

    def sh(*cmd, check=True):
        if cmd[:2] == ("systemctl", "restart"):
            seen.append(("restart", cmd[2]))
        return original(*cmd, check=check)
    monkeypatch.setattr(sfh, "sh", sh)
    return seen


def test_the_host_tool_drains_then_restarts(host, monkeypatch):  # noqa: F811
    (host.data / "gateways.json").write_text(json.dumps(GW))
    seen = _calls(host, monkeypatch)
    host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert seen == [("drain", GW), ("restart", "svc.service")], seen
    assert json.loads((host.data / "gate.json").read_text())["result"] == "passed"


def test_a_gateway_that_did_not_take_the_host_out_stops_the_switch_before_anything_changes(host, monkeypatch):  # noqa
    (host.data / "gateways.json").write_text(json.dumps(GW))
    host.h.set_gate("r-aaaaaaaaaaaa", "passed")
    gate_before = (host.data / "gate.json").read_text()
    seen = _calls(host, monkeypatch, unacknowledged=["10.0.0.2"])
    with pytest.raises(sfh.Fail, match=r"drain: gateway\(s\) 10.0.0.2 did not take this host out of their pool .*"
                                       r"not restarting \(it serves r-aaaaaaaaaaaa as before\)"):
        host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert seen == [("drain", GW)]  # no restart
    assert host.h.current() == "r-aaaaaaaaaaaa" and (host.data / "gate.json").read_text() == gate_before
    # a rollout's --without-gateway names it: the drain does not wait for it, and the switch goes on
    seen.clear()
    host.h.activate("r-bbbbbbbbbbbb", revert=True, skip_gateways=("10.0.0.2",))
    assert seen == [("drain", {**GW, "gateways": ["10.0.0.1"]}), ("restart", "svc.service")], seen
    assert host.h.current() == "r-bbbbbbbbbbbb"


def test_no_drain_without_gateways_or_when_nothing_serves(host, monkeypatch):  # noqa: F811
    seen = _calls(host, monkeypatch)
    host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert seen == [("restart", "svc.service")], seen  # a fleet without a gateway group: a plain restart
    (host.data / "gateways.json").write_text(json.dumps(GW))
    host.system.active = "failed"
    seen.clear()
    host.h.activate("r-aaaaaaaaaaaa", revert=True)
    assert seen == [("restart", "svc.service")], seen  # nothing serving: nothing to drain
