"""The Spark's readiness agent for the gateways: `up` only while the current release has passed its gate and the
container has not started again since; served for real over TCP, one word per connection."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from specfleet.host.layout import Layout
from tests.unit.installed import installed
from tests.unit.test_bench import free_port

AGENT = installed() / "gateway_agent.py"
TOOL = installed() / "specfleet_host.py"


def _once(data: Path) -> tuple[str, str]:
    out = subprocess.run([sys.executable, str(AGENT), "--data-dir", str(data), "--once"], capture_output=True,
                         text=True, timeout=30, check=True).stdout.strip()
    word, _, why = out.partition("\t")
    return word, why


def _release(data: Path, rid: str = "r-aaaaaaaaaaaa") -> None:
    (data / "releases" / rid).mkdir(parents=True)
    (data / "releases" / rid / "release.json").write_text(json.dumps({"id": rid}))
    (data / "current").symlink_to(f"releases/{rid}")


def _gate(data: Path, result: str, started) -> None:
    (data / "gate.json").write_text(json.dumps({"release": "r-aaaaaaaaaaaa", "result": result, "started": started}))


def test_down_until_the_gate_passes_and_after_a_restart_of_its_own(tmp_path):
    assert _once(tmp_path) == ("down", "no release installed")
    _release(tmp_path)
    assert _once(tmp_path)[0] == "down"
    marker = Path(Layout(str(tmp_path)).started_marker)
    marker.touch()
    _gate(tmp_path, "running", None)
    assert _once(tmp_path) == ("down", "a host job is switching or gating this host")
    _gate(tmp_path, "passed", os.stat(marker).st_mtime)
    assert _once(tmp_path) == ("up", "r-aaaaaaaaaaaa passed its gate")
    os.utime(marker, (time.time() + 5, time.time() + 5))  # systemd started the container again on its own
    assert _once(tmp_path) == ("down", "the serving container started again since its gate passed")


def test_a_spark_that_just_joined_enters_on_its_gate_and_leaves_at_its_first_start_of_its_own(tmp_path):
    """Joining a gateway restarts nothing: no marker yet (the drop-in applies from the next start), so the gate that
    passed before the join stands, also one that recorded a marker of an earlier membership. The first start the
    drop-in marks and no gate saw takes the Spark out."""
    _release(tmp_path)
    _gate(tmp_path, "passed", None)
    assert _once(tmp_path) == ("up", "r-aaaaaaaaaaaa passed its gate")
    _gate(tmp_path, "passed", 1234.5)  # gated while behind a gateway before; the marker went with the gateway group
    assert _once(tmp_path)[0] == "up"
    Path(Layout(str(tmp_path)).started_marker).touch()  # systemd started it again, now with the drop-in
    assert _once(tmp_path) == ("down", "the serving container started again since its gate passed")


def test_the_host_tool_records_the_start_marker_its_gate_saw(tmp_path):
    marker = Path(Layout(str(tmp_path)).started_marker)
    marker.touch()
    code = (f"import sys; sys.path.insert(0, {str(TOOL.parent)!r}); import specfleet_host as h; "
            f"h.Host({str(tmp_path)!r}).set_gate('r-aaaaaaaaaaaa', 'passed')")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    _release(tmp_path)
    assert json.loads((tmp_path / "gate.json").read_text())["started"] == os.stat(marker).st_mtime
    assert _once(tmp_path)[0] == "up"


def test_served_over_tcp_one_word_per_connection(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(AGENT), "--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{port}"])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
                    assert c.makefile().read() == "down\n"
                    break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the agent never listened"
                time.sleep(0.1)
        _release(tmp_path)
        _gate(tmp_path, "passed", None)  # no start marker yet (a unit from before the gateway): the gate decides
        with socket.create_connection(("127.0.0.1", port), timeout=2) as c:
            assert c.makefile().read() == "up\n"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_bench_run_holds_the_host_out_of_the_pool_even_between_its_variants(tmp_path):
    _release(tmp_path)
    _gate(tmp_path, "passed", None)
    assert _once(tmp_path)[0] == "up"
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "owner").write_text("bench 3f2a9c1e by nvidia@ctl since 2026-11-24T07:00:00Z\n")
    assert _once(tmp_path) == ("down", "held out of the pool by a bench run")  # a variant passed its gate: still out
    (tmp_path / "lock" / "owner").write_text("rollout 77aa by nvidia@ctl since 2026-11-24T07:00:00Z\n")
    assert _once(tmp_path)[0] == "up"  # a rollout's lock alone does not: its switches drain and gate each host
