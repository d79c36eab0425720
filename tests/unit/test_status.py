"""`specfleet status` and `specfleet logs`: the one read-only probe run for real by a local shell against a scratch
data dir and the trtllm-serve stand-in serving locally; the command (table, --json, exit codes) on pyinfra's @fake
connector; the ssh command line of `logs`."""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.request

import pytest
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.engines.catalog import ENGINES
from specfleet.fleet import run as runner
from specfleet.overview import report as status_report
from specfleet.overview import run as status
from tests.unit.fakehost import make_plans, run_deploy
from tests.unit.test_bench import VLLM_MODEL, standin, vllm_standin  # noqa: F401 (fixtures: the stand-ins served locally)

SVC = "specfleet-test-nonexistent"


def _probe(data_dir, metrics=False):
    fact = status.HostOverview()
    cmd = fact.command(data_dir=str(data_dir), service=SVC, metrics=metrics)
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=60)
    return fact.process(out.stdout.splitlines())


def _scratch(tmp_path, url, iter_stats=True, gate="passed", counters=None):
    rel = tmp_path / "data" / "releases" / "r-1"
    rel.mkdir(parents=True)
    (rel / "release.json").write_text(json.dumps({"id": "r-1", "profile": "eagle3", "service": SVC, "url": url,
                                                  "image": "specfleet-standin/trtllm-serve:x",
                                                  **({"counters": counters} if counters else {})}))
    (rel / "extra-llm-api-config.yml").write_text(f"enable_iter_perf_stats: {'true' if iter_stats else 'false'}\n")
    (tmp_path / "data" / "current").symlink_to(rel)
    (tmp_path / "data" / "gate.json").write_text(json.dumps({"release": "r-1", "result": gate, "at": "2026-01-01T00:00:00Z"}))
    return tmp_path / "data"


def _complete(url, n=2, model=None):
    for _ in range(n):
        body = json.dumps({"prompt": "hello there", "max_tokens": 8, "ignore_eos": True,
                           **({"model": model} if model else {})}).encode()
        urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=body,
                                                      headers={"Content-Type": "application/json"}), timeout=10).read()


def test_probe_reads_everything_and_metrics_only_when_asked(tmp_path, standin):  # noqa: F811
    url = standin(3, {"acceptance": [1.0, 1.0, 0.0], "draft_step_ms": 1.0})
    data = _scratch(tmp_path, url)
    _complete(url)
    info = _probe(data)
    assert info["release"] == "r-1" and info["profile"] == "eagle3" and info["health"] == 200
    assert info["gate"]["result"] == "passed" and info["iter_stats"] is True and info["metrics"] is None
    assert info["memory"]["source"] in ("meminfo", "nvidia-smi") and info["memory"]["used_bytes"] > 0
    assert info["disk_free_bytes"] > 0 and info["lock"] is None
    assert info["unit"] != "active"  # no such unit here: unhealthy, said so
    assert status_report.healthy(info) == (False, f"unit {info['unit']}")
    (data / "lock").mkdir()
    (data / "lock" / "owner").write_text("bench 1234abcd by me@ctl pid 1 since x\n")
    assert "skipped" in _probe(data, metrics=True)["metrics"]  # a bench is reading /metrics: leave it alone
    (data / "lock" / "owner").unlink()
    m = _probe(data, metrics=True)["metrics"]  # the stats were not drained by the reads above
    # 2 requests x (1 context iteration + ceil(7/3)=3 iterations accepting 2 of 3 drafts)
    assert m["iterations"] == 8 and m["acceptance_length"] == 3.0 and m["acceptance_rate"] == pytest.approx(2 / 3)
    assert m["tokens_per_s"] > 0
    assert _probe(data, metrics=True)["metrics"]["iterations"] == 0  # drained by the previous read



# ---- a vLLM host's drafts per second: over the time its server has served, not its model's load ----------------------
def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _vllm_exposition(drafts: int, started: float, created: float | None) -> str:
    names = ENGINES["vllm"].counters.record()["names"]
    lines = [f'{n}{{engine="0",model_name="m"}} {v}.0' for n, v in zip(names, (drafts, 3 * drafts, 2 * drafts),
                                                                         strict=True)]
    if created is not None:
        lines += [f'{n.removesuffix("_total")}_created{{engine="0",model_name="m"}} {created}' for n in names]
    return "\n".join([*lines, f"process_start_time_seconds {started}"]) + "\n"


def _vllm_metrics(monkeypatch, exposition: str, gate: dict, uptime_s: int | None) -> dict:
    from specfleet.overview.host import overview

    monkeypatch.setattr(overview, "get", lambda url, path, timeout=5: (200, exposition.encode()))
    out = {"health": 200, "iter_stats": False, "lock": None, "uptime_s": uptime_s, "release": "r-1", "gate": gate}
    return overview.metrics(out, "http://127.0.0.1:8000", False, ENGINES["vllm"].counters.record())


def test_status_drafts_per_second_divide_by_the_time_since_the_gate_passed_not_since_the_start(monkeypatch):
    """The server started 400 s ago, loaded its model for 300 s and passed its gate 100 s ago: 150 drafts since are
    1.5 a second, not 150 / 400."""
    now = time.time()
    gate = {"release": "r-1", "result": "passed", "at": _iso(now - 100)}
    got = _vllm_metrics(monkeypatch, _vllm_exposition(150, now - 400, now - 399), gate, 400)
    assert got["drafts_per_s"] == pytest.approx(1.5, rel=0.02), got  # `at` is to the second
    assert got["serving_s"] == pytest.approx(100, abs=1.5) and got["serving"] == f"since its gate passed at {gate['at']}"
    assert (got["drafts"], got["acceptance_length"], got["acceptance_rate"]) == (150, 3.0, pytest.approx(2 / 3))


@pytest.mark.parametrize("gate, started, created, why", [
    ({"release": "r-1", "result": "passed", "at": "A"}, -50, -49,
     "unknown: the server started after its gate passed (at A)"),
    ({"release": "r-1", "result": "running", "at": "A"}, -400, -399, "unknown: its gate has not passed for r-1"),
    ({"release": "r-0", "result": "passed", "at": "A"}, -400, -399, "unknown: its gate has not passed for r-1"),
    ({"release": "r-1", "result": "passed", "at": "A"}, None, None,
     "unknown: nothing tells when the server started (no process_start_time_seconds, no _created series, no "
     "container start)"),
])
def test_status_drafts_per_second_are_unknown_when_the_serving_time_is(monkeypatch, gate, started, created, why):
    now = time.time()
    gate = {**gate, "at": _iso(now - 100)}
    text = _vllm_exposition(150, now + started, now + created) if started else _vllm_exposition(150, 0, None)
    if not started:
        text = "\n".join(line for line in text.splitlines() if not line.startswith("process_")) + "\n"
    got = _vllm_metrics(monkeypatch, text, gate, None)
    assert got["drafts_per_s"] is None and got["serving_s"] is None
    assert got["serving"] == why.replace("A", gate["at"]) and got["drafts"] == 150


def test_probe_reads_a_vllm_standins_counters_over_the_time_it_has_served(tmp_path, vllm_standin):  # noqa: F811
    url = vllm_standin(3)
    data = _scratch(tmp_path, url, counters=ENGINES["vllm"].counters.record())
    gate_at = _iso(time.time())  # the stand-in started before: its gate passes now
    (data / "gate.json").write_text(json.dumps({"release": "r-1", "result": "passed", "at": gate_at}))
    _complete(url, model=VLLM_MODEL)
    m = _probe(data)["metrics"]  # no --metrics: reading the counters consumes nothing
    steps = 2 * math.ceil(8 / 3)  # 2 requests of 8 tokens, 3 a step
    assert (m["drafts"], m["acceptance_length"]) == (steps, 3.0), m
    assert m["serving"] == f"since its gate passed at {gate_at}" and 0 < m["serving_s"] < 60
    assert m["drafts_per_s"] == pytest.approx(steps / m["serving_s"])
    (data / "gate.json").write_text(json.dumps({"release": "r-1", "result": "passed", "at": "2020-01-01T00:00:00Z"}))
    m = _probe(data)["metrics"]
    assert m["drafts_per_s"] is None and m["serving"] == ("unknown: the server started after its gate passed (at "
                                                          "2020-01-01T00:00:00Z)")

def test_probe_health_down_and_no_release(tmp_path):
    data = _scratch(tmp_path, "http://127.0.0.1:9")  # nothing listens on port 9
    info = _probe(data)
    assert info["health"] != 200 and status_report.healthy({**info, "unit": "active"})[1].startswith("/health ")
    empty = _probe(tmp_path / "nothing-here")
    assert empty["release"] is None and status_report.healthy({**empty, "unit": "active"}) == (False, "no release")


def test_healthy_rules():
    good = {"release": "r-1", "unit": "active", "health": 200, "gate": {"release": "r-1", "result": "passed"}}
    assert status_report.healthy(good) == (True, "ok")
    assert status_report.healthy(None) == (False, "unreachable")
    assert status_report.healthy({**good, "gate": {"release": "r-0", "result": "passed"}}) == (False, "gate passed (for r-0)")
    assert status_report.healthy({**good, "gate": {"release": "r-1", "result": "failed"}}) == (False, "gate failed")


FLEET = """all:
  hosts:
    spark-01: {}
    spark-02: {}
    spark-03: {}
"""


def _answer(info: dict | None):
    if info is None:
        return {"python3 -c": {"stdout": "", "stderr": "ssh: connect refused", "success": False}}
    return {"python3 -c": json.dumps(info)}


def _fake_run_on(answers, answer=None):
    answer = answer or _answer

    def run_on(plans, hosts, fn, *args):
        state = run_deploy({h: plans[h] for h in hosts}, fn, *args, responses=lambda p: answer(answers[p.settings.host]))
        out = args[0]
        for key in list(out):
            out[key.removeprefix("@fake/")] = out.pop(key)
        return {h.name.removeprefix("@fake/") for h in state.failed_hosts}
    return run_on


GOOD = {"release": "r-1", "profile": "eagle3", "unit": "active", "health": 200, "uptime_s": 3700,
        "gate": {"release": "r-1", "result": "passed", "at": "2026-01-01T00:00:00Z"},
        "memory": {"source": "meminfo", "used_bytes": 3e9, "available_bytes": 1e9}, "disk_free_bytes": 5e9,
        "iter_stats": False, "metrics": None, "lock": None}


def test_status_command_table_json_and_exit_codes(fleet_file, monkeypatch, tmp_path):
    fleet_file(FLEET, lock=False)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    answers = {"spark-01": GOOD, "spark-02": GOOD, "spark-03": GOOD}
    monkeypatch.setattr(runner, "run_on", _fake_run_on(answers))
    r = CliRunner().invoke(main, ["status", "inventory.py"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split()[:4] == ["host", "state", "release", "profile"]
    assert lines[1].split()[:8] == ["spark-01", "ok", "r-1", "eagle3", "active", "200", "passed", "2026-01-01T00:00:00Z"]
    assert "1h01m" in lines[1] and "3.0G" in lines[1] and "5.0G" in lines[1]
    answers["spark-02"] = {**GOOD, "gate": {"release": "r-1", "result": "failed"}}
    answers["spark-03"] = None
    r = CliRunner().invoke(main, ["status", "inventory.py", "--json"])
    assert r.exit_code == 1, r.output
    rows = {x["host"]: x for x in json.loads(r.output)}
    assert rows["spark-01"]["healthy"] and rows["spark-02"]["problem"] == "gate failed"
    assert rows["spark-03"]["reachable"] is False and rows["spark-03"]["problem"] == "unreachable"
    r = CliRunner().invoke(main, ["status", "inventory.py", "--limit", "spark-01"])
    assert r.exit_code == 0 and "spark-02" not in r.output
    r = CliRunner().invoke(main, ["status", "inventory.py", "--limit", "nope"])
    assert r.exit_code == 2 and "matches no host" in r.output


def test_status_probe_is_one_read_only_command():
    plans = make_plans({"spark-01": {}}, None)
    out: dict = {}
    state = run_deploy(plans, status.collect, out, False, responses=lambda p: _answer(GOOD))
    cmds = list(next(iter(state.inventory)).connector.executed_commands)
    probe = [c for c in cmds if "python3 -c" in c]
    assert len(probe) == 1 and out["@fake/spark-01"]["release"] == "r-1"


def test_logs_ssh_command_line(fleet_file, monkeypatch, tmp_path):
    conn = {"ssh_hostname": "127.0.0.1", "ssh_port": 2222, "ssh_user": "spark", "ssh_key": "/k",
            "ssh_known_hosts_file": "/dev/null", "ssh_strict_host_key_checking": "no", "_sudo": True}
    argv = status.ssh_argv("spark-01", conn, "journalctl -u x -n 5 --no-pager -f")
    assert argv == ["ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "/k", "-o", "UserKnownHostsFile=/dev/null",
                    "-o", "StrictHostKeyChecking=no", "spark@127.0.0.1", "sudo -n journalctl -u x -n 5 --no-pager -f"]
    fleet_file(FLEET, lock=False)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    seen = []

    class P:
        def __init__(self, argv):
            seen.append(argv)

        def wait(self):
            return 0

    monkeypatch.setattr(status.subprocess, "Popen", P)
    r = CliRunner().invoke(main, ["logs", "spark-02", "-n", "7"])
    assert r.exit_code == 0 and seen[0][-2:] == ["spark-02", "journalctl -u specfleet-trtllm -n 7 --no-pager"]
    r = CliRunner().invoke(main, ["logs", "spark-09"])
    assert r.exit_code == 2 and "spark-09: not in the inventory" in r.output


GATEWAY_FLEET = """all:
  hosts:
    spark-01: {ssh_hostname: 10.0.0.2, serves: eagle3}
    spark-02: {ssh_hostname: 10.0.0.3, serves: eagle3}
  children:
    gateway:
      hosts:
        gw-1: {ssh_hostname: 10.0.0.1}
"""


def test_status_shows_each_spark_in_each_gateway_pool_and_a_row_per_gateway(fleet_file, monkeypatch, tmp_path):
    fleet_file(GATEWAY_FLEET, lock=False)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    servers = [{"backend": "model_1_openai_gpt-oss-120b", "server": "spark-01", "status": "UP", "check": "L7OK",
                "agent": "L7OK", "sessions": 1, "queued": 0},
               {"backend": "model_1_openai_gpt-oss-120b", "server": "spark-02", "status": "DRAIN (agent)",
                "check": "L7OK", "agent": "L7OK", "sessions": 0, "queued": 0}]
    answers = {"spark-01": GOOD, "spark-02": GOOD, "gw-1": servers}

    def answer(value):
        if isinstance(value, list):  # the gateway's `haproxy_admin.py state`
            return {"--socket /run/haproxy/admin.sock state": json.dumps(value)}
        return _answer(value)
    monkeypatch.setattr(runner, "run_on", _fake_run_on(answers, answer))
    r = CliRunner().invoke(main, ["status", "inventory.py"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "gw-1  gateway  ok  1/2 Spark(s) ready" in lines
    assert any(line.split() == ["spark-01", "in", "pool:", "gw-1", "ready"] for line in lines), lines
    assert any(line.split() == ["spark-02", "in", "pool:", "gw-1", "drain"] for line in lines), lines
    assert not [line for line in lines if line.startswith("gw-1 ") and "BAD" in line]
    servers[0]["status"] = "DOWN (agent)"
    r = CliRunner().invoke(main, ["status", "inventory.py", "--json"])
    assert r.exit_code == 1, r.output  # the model has no ready Spark left
    rows = {x["host"]: x for x in json.loads(r.output)}
    assert rows["gw-1"]["problem"] == "no ready Spark for model_1_openai_gpt-oss-120b"
    assert rows["spark-01"]["pool"] == {"gw-1": "down"} and rows["spark-01"]["healthy"]


def test_a_pair_is_one_row_with_both_hosts_healthy_only_when_the_worker_holds_its_side(fleet_file, monkeypatch,
                                                                                        tmp_path):
    from tests.unit.test_pair_fleet import _fleet

    fleet_file(_fleet(pair_more="      vars: {serves: qwen3_eagle3_pair}\n"), lock=False)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    head = {**GOOD, "release": "r-h", "gate": {"release": "r-h", "result": "passed"},
            "pair": {"role": "head", "worker": {"host": "spark-2", "release": "r-w"}}}
    worker = {**GOOD, "release": "r-w", "health": None, "gate": {"release": "r-w", "result": "passed", "role": "worker"},
              "pair": {"role": "worker", "head": "spark-1"}}
    answers = {"spark-1": head, "spark-2": worker}
    monkeypatch.setattr(runner, "run_on", _fake_run_on(answers))

    def status_of(*more):
        r = CliRunner().invoke(main, ["status", "inventory.py", *more])
        return r.exit_code, r.output.splitlines()

    code, lines = status_of()
    assert code == 0 and len(lines) == 3, lines  # the header, ONE row, the --metrics hint
    assert lines[1].split()[:3] == ["spark-1+spark-2", "ok", "r-h"]
    for broken, problem in (({"unit": "inactive"}, "worker spark-2: unit inactive"),
                            ({"release": "r-x", "gate": {"release": "r-x", "result": "passed"}},
                             "worker spark-2: holds r-x, not r-w"),
                            ({"gate": {"release": "r-w", "result": "failed"}}, "worker spark-2: its side failed")):
        answers["spark-2"] = {**worker, **broken}
        code, lines = status_of()
        assert code == 1 and lines[1].startswith("spark-1+spark-2  BAD: " + problem), (problem, lines)
    answers["spark-2"] = None
    code, lines = status_of("--json")
    rows = json.loads("\n".join(lines))
    assert code == 1 and [r["hosts"] for r in rows] == [["spark-1", "spark-2"]]
    assert rows[0]["problem"] == "worker spark-2 unreachable"
    answers["spark-2"] = worker
    code, lines = status_of("--limit", "spark-1")  # the head alone: its row still reads its worker
    assert code == 0 and lines[1].split()[:2] == ["spark-1+spark-2", "ok"], lines
    # the worker alone (--limit): judged as a worker, not by /health
    code, lines = status_of("--limit", "spark-2")
    assert code == 0 and lines[1].split()[:2] == ["spark-2", "ok"], lines


# ---- `specfleet releases` --------------------------------------------------------------------------------------
RELEASES_FLEET = """all:
  hosts:
    spark-01: {ssh_hostname: 10.0.0.11}
    spark-02: {ssh_hostname: 10.0.0.12}
    spark-03: {ssh_hostname: 127.0.0.1, ssh_port: 9}
"""  # spark-03: nothing listens on port 9, so SSH cannot connect (a host that is down)


def _releases_answers(plan):
    from specfleet.fleet.status import ReleaseStatus

    fact = ReleaseStatus().command(data_dir=plan.settings.data_dir).split(" 2>")[0]
    if plan.settings.host == "spark-02":  # reachable, nothing of specfleet yet: the tool's `|| echo '{}'`
        return {fact: "{}"}
    record = {"id": "r-1", "created": "2026-01-01T00:00:00Z", "profile": "eagle3", "image": "img", "models": {}}
    return {fact: json.dumps({"current": "r-1", "active": "active", "releases": [record],
                              "gate": {"release": "r-1", "result": "passed", "at": "t"}})}


def test_releases_says_which_host_it_could_not_read_and_exits_1(fleet_file, monkeypatch, tmp_path):
    from tests.unit.fakehost import fake_run_on

    fleet_file(RELEASES_FLEET)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    fake_run_on(monkeypatch, _releases_answers, unreachable=("spark-03",))
    r = CliRunner().invoke(main, ["releases", "inventory.py"])
    out = [line for line in r.stdout.splitlines() if not line.startswith(" ")]
    assert out == ["spark-01: service active, previous -", "spark-02: no specfleet release yet",
                   "spark-03: UNREACHABLE (status not read)"], r.output
    assert r.exit_code == 1, r.output
    r = CliRunner().invoke(main, ["releases", "inventory.py", "--limit", "spark-01,spark-02"])
    assert r.exit_code == 0, r.output
    assert "UNREACHABLE" not in r.output


def test_a_pair_whose_worker_is_unreachable_exits_1(fleet_file, monkeypatch, tmp_path):
    from tests.unit.fakehost import fake_run_on
    from tests.unit.test_pair_fleet import _fleet

    fleet_file(_fleet(worker="{pair_role: worker, ssh_hostname: 127.0.0.1, ssh_port: 9}",
                      pair_more="      vars: {serves: qwen3_eagle3_pair}\n"))
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    fake_run_on(monkeypatch, _releases_answers, unreachable=("spark-2",))
    r = CliRunner().invoke(main, ["releases", "inventory.py"])
    assert "  worker spark-2: UNREACHABLE (status not read)" in r.stdout.splitlines(), r.output
    assert r.exit_code == 1, r.output
