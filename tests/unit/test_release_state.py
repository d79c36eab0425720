"""The release state is read one way: serving/host/release_state.py. The converge's probe (SpecfleetHost), `specfleet
status`'s probe (HostOverview) and the host tool (`specfleet-host status`, ReleaseStatus) all run it, for real here
against a scratch data dir, and agree; no other product module reads the state's files; a host whose state cannot
be read is refused by the preflight and left as it is."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from specfleet.fleet.status import SpecfleetHost
from specfleet.host import layout
from specfleet.overview import run as status
from specfleet.serving.host import release_state
from specfleet.steps import converge
from tests.unit.fakehost import converged_responses, executed, make_plans, run_deploy, status_command
from tests.unit.installed import installed

SVC = "specfleet-test-nonexistent"
ROOT = Path(__file__).resolve().parents[2]


def _scratch(data: Path) -> None:
    for rid, created in (("r-aaaaaaaaaaaa", "2026-01-01"), ("r-bbbbbbbbbbbb", "2026-01-02")):
        (data / "releases" / rid).mkdir(parents=True)
        (data / "releases" / rid / layout.RECORD_FILE).write_text(json.dumps(
            {"id": rid, "created": created, "profile": "eagle3", "service": SVC, "models": {}}))
    (data / "current").symlink_to("releases/r-bbbbbbbbbbbb")
    (data / "previous").write_text("r-aaaaaaaaaaaa\n")
    (data / "gate.json").write_text(json.dumps({"release": "r-bbbbbbbbbbbb", "result": "passed", "at": "x"}))
    (data / "lock").mkdir()
    (data / "lock" / "owner").write_text("rollout 1234abcd by me@ctl pid 1 since x\n")
    (data / "jobs" / "j1").mkdir(parents=True)
    (data / "jobs" / "j1" / "job.json").write_text(json.dumps({"key": "activate:r-bbbbbbbbbbbb"}))
    (data / "jobs" / "active").write_text("j1\n")


def _sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, check=True).stdout


def test_the_reader_gets_every_path_and_name_from_the_layout():
    assert not [n for n in ("release.json", "specfleet-job-", "gate.json", "lock/owner") if n in Path(
        release_state.__file__).read_text()]  # nothing of the layout written again in the reader
    assert layout.HOST_PROGRAMS[layout.STATE_FILE] == "release_state.py" and layout.STATE_FILE in layout.MODULES
    assert set(layout.Layout("/d").release_paths()) == set(release_state._FIELDS)


def test_the_three_readers_agree_on_a_scratch_host(tmp_path):
    _scratch(tmp_path)
    want = release_state.read(layout.Layout(str(tmp_path)))
    assert want["current"] == "r-bbbbbbbbbbbb" and want["previous"] == "r-aaaaaaaaaaaa"
    assert want["releases"] == ["r-aaaaaaaaaaaa", "r-bbbbbbbbbbbb"] and want["record"]["id"] == "r-bbbbbbbbbbbb"
    assert want["lock"].startswith("rollout 1234abcd") and want["job"]["key"] == "activate:r-bbbbbbbbbbbb"

    st = SpecfleetHost().process(_sh(status_command(str(tmp_path), SVC)).splitlines()).release
    assert not st.release_state_error
    assert (st.current, st.previous, st.releases, st.lock, st.gate, st.current_release) == (
        want["current"], want["previous"], want["releases"], want["lock"], want["gate"], want["record"])

    probe = status.HostOverview()
    info = probe.process(_sh(probe.command(data_dir=str(tmp_path), service=SVC)).splitlines())
    assert (info["release"], info["gate"], info["lock"], info["profile"]) == (
        want["current"], want["gate"], want["lock"], "eagle3")

    tool = installed() / "specfleet_host.py"
    out = json.loads(_sh(f"{sys.executable} {tool} --data-dir {tmp_path} status"))
    assert (out["current"], out["previous"], out["lock"], out["gate"]) == (
        want["current"], want["previous"], want["lock"], want["gate"])
    assert [r["id"] for r in out["releases"]] == ["r-bbbbbbbbbbbb", "r-aaaaaaaaaaaa"]  # newest first


def test_a_fresh_host_reads_empty(tmp_path):
    st = SpecfleetHost().process(_sh(status_command(str(tmp_path / "none"), SVC)).splitlines()).release
    assert (st.current, st.previous, st.releases, st.lock, st.gate, st.job, st.release_state_error) == (
        "", "", [], "", {}, None, "")


def test_a_damaged_gate_or_record_reads_as_none_not_as_a_crash(tmp_path):
    _scratch(tmp_path)
    (tmp_path / "gate.json").write_text('{"release": "r-b')  # cut short by a power loss
    (tmp_path / "releases" / "r-bbbbbbbbbbbb" / layout.RECORD_FILE).write_text("")
    state = release_state.read(layout.Layout(str(tmp_path)))
    assert state["gate"] == {} and state["record"] == {} and state["current"] == "r-bbbbbbbbbbbb"
    assert [r["id"] for r in release_state.records(layout.Layout(str(tmp_path)))] == ["r-aaaaaaaaaaaa"]


def test_a_host_whose_state_cannot_be_read_is_refused_and_left_serving():
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    responses = converged_responses(plan, current="r-000000000000", release_missing=True)
    key = next(k for k in responses if not isinstance(k, str) and "export DATA" in k.pattern)
    responses[key] = [ln for ln in responses[key] if not ln.startswith("release_state\t")] + [
        "release_state\tTraceback (most recent call last): OSError: [Errno 5] Input/output error"]
    responses["exit 1"] = {"success": False, "stderr": "preflight failed"}
    state = run_deploy({"spark-01": plan}, converge, "eagle3", responses=lambda p: responses)
    cmds = executed(state)["spark-01"]
    refusal = [c for c in cmds if "exit 1" in c]
    assert len(refusal) == 1 and "spark-01: preflight: the release state under /var/lib/specfleet could not be read" \
        " (Traceback (most recent call last): OSError: [Errno 5] Input/output error)" in refusal[0], refusal
    # refused before anything changed: no host job, no activate, no pull (the release it had keeps serving)
    after = cmds[cmds.index(refusal[0]):]
    assert not [c for c in after if any(w in c for w in ("job start", " activate ", "docker pull", "fetch-model"))]
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]


_READERS_ONLY = {"gate_file", "lock_owner", "active_job", "current_record"}  # Layout attributes of the state's files
_ALLOWED = {  # the one reader, the layout, the host tool (which writes them), cleanup (removes them), testinfra
    "specfleet/serving/host/release_state.py", "specfleet/host/layout.py", "specfleet/serving/host/specfleet_host.py",
    "specfleet/steps/cleanup.py", "specfleet/testinfra/fixtures.py"}


def test_no_other_module_reads_the_state_files():
    found = []
    for path in sorted((ROOT / "specfleet").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in _ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in _READERS_ONLY:
                found.append(f"{rel}:{node.lineno}: .{node.attr}")
    assert not found, found
    probe = (ROOT / "specfleet" / "serving" / "host" / "release_status.sh").read_text()
    assert "$RELEASE_STATE" in probe
    assert not [v for v in ("$CURRENT", "$PREVIOUS", "$RELEASES", "$GATE", "$LOCK_OWNER", "$ACTIVE_JOB") if v in probe]
