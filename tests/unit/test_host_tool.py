"""specfleet-host's release bookkeeping on a scratch data dir (no systemd involved)."""

import json
import os
import sys

from specfleet.serving.host.specfleet_host import Host


def _snapshot(hub, repo, commit, files):
    repo_dir = hub / f"models--{repo.replace('/', '--')}"
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name in files:
        blob = repo_dir / "blobs" / f"{commit}-{name}"
        blob.write_text(name)
        os.symlink(os.path.relpath(blob, snap), snap / name)


def _release(data, rid, created, target_commit, draft_commit=None):
    rdir = data / "releases" / rid
    rdir.mkdir(parents=True)
    models = {"target": {"repo": "org/target", "commit": target_commit}}
    if draft_commit:
        models["draft"] = {"repo": "org/draft", "commit": draft_commit}
        ddir = data / "drafts" / "org--draft" / draft_commit
        ddir.mkdir(parents=True, exist_ok=True)
        os.symlink(ddir, rdir / "draft")
    (rdir / "release.json").write_text(json.dumps({"id": rid, "created": created, "models": models, "service": "x"}))


def test_prune_keeps_newest_current_previous_and_their_models(tmp_path):
    hub = tmp_path / "hf" / "hub"
    for i in range(6):
        _snapshot(hub, "org/target", f"t{i}", ["a.safetensors", "config.json"])
        _snapshot(hub, "org/draft", f"d{i}", ["model.safetensors"])
        _release(tmp_path, f"r-{i:012d}", f"2026-01-0{i + 1}T00:00:00Z", f"t{i}", f"d{i}")
    _snapshot(hub, "org/unused", "u0", ["x"])
    os.symlink("releases/r-000000000000", tmp_path / "current")  # oldest is current (after a rollback)
    (tmp_path / "previous").write_text("r-000000000001\n")
    (hub / "models--org--target" / "blobs" / "orphan.incomplete").write_text("partial")

    Host(str(tmp_path)).prune(keep=3)

    kept = sorted(p.name for p in (tmp_path / "releases").iterdir())
    assert kept == ["r-000000000000", "r-000000000001", "r-000000000005"]  # current, previous, newest
    snaps = sorted(p.name for p in (hub / "models--org--target" / "snapshots").iterdir())
    assert snaps == ["t0", "t1", "t5"]
    blobs = sorted(p.name for p in (hub / "models--org--target" / "blobs").iterdir())
    assert blobs == sorted([f"t{i}-{n}" for i in (0, 1, 5) for n in ("a.safetensors", "config.json")] + ["orphan.incomplete"])
    assert sorted(p.name for p in (tmp_path / "drafts" / "org--draft").iterdir()) == ["d0", "d1", "d5"]
    assert not (hub / "models--org--unused").exists()
    # a kept release's files still resolve: switching to it needs no download
    assert (hub / "models--org--target" / "snapshots" / "t1" / "a.safetensors").read_text() == "a.safetensors"


def test_status_lists_releases_newest_first(tmp_path):
    _release(tmp_path, "r-000000000001", "2026-01-01T00:00:00Z", "t1")
    _release(tmp_path, "r-000000000002", "2026-01-02T00:00:00Z", "t2")
    os.symlink("releases/r-000000000001", tmp_path / "current")
    (tmp_path / "previous").write_text("r-000000000002\n")
    host = Host(str(tmp_path))
    assert host.current() == "r-000000000001" and host.previous() == "r-000000000002"
    assert [r["id"] for r in host.all_records()] == ["r-000000000002", "r-000000000001"]


# ---- activate: switch + gate + revert, with systemctl/docker/HTTP simulated ---------------------------------
import subprocess  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402

from specfleet.serving.host import specfleet_host as sfh  # noqa: E402


class FakeSystem:
    """systemctl/docker/journalctl as a dict of unit state; `fail` names commands that fail."""

    def __init__(self, active="active", fail=()):
        self.active, self.fail, self.calls = active, set(fail), []
        self.healthy = True

    def sh(self, *cmd, check=True):
        self.calls.append(cmd)
        rc, out = 0, ""
        if cmd[:2] == ("systemctl", "is-active"):
            out = self.active
        elif cmd[:2] == ("systemctl", "is-enabled"):
            out = "enabled"
        elif cmd[:2] == ("systemctl", "restart"):
            if "restart" in self.fail:
                rc = 1
            else:
                self.active = "active"
        elif cmd[:2] == ("docker", "inspect"):
            out = "true" if self.active == "active" else ""
        if rc and check:
            raise sfh.Fail(f"{' '.join(cmd)} failed: Job for x.service failed because the control process exited")
        return subprocess.CompletedProcess(cmd, rc, out, "")


def _complete_release(data, rid, created, service="svc"):
    _snapshot(data / "hf" / "hub", "org/target", f"c-{rid}", ["config.json"])
    rdir = data / "releases" / rid
    rdir.mkdir(parents=True)
    for name in ("extra-llm-api-config.yml", "smoke.json", f"{service}.service"):
        (rdir / name).write_text(f"{name} of {rid}\n")
    (rdir / "release.json").write_text(json.dumps({
        "id": rid, "created": created, "service": service, "image": "img",
        "models": {"target": {"repo": "org/target", "commit": f"c-{rid}"}}, "url": "http://127.0.0.1:1",
        "gate": {"health_timeout_sec": 5, "health_interval_sec": 0, "smoke_timeout_sec": 5}}))


@pytest.fixture
def host(tmp_path, monkeypatch):
    data = tmp_path / "data"
    _complete_release(data, "r-aaaaaaaaaaaa", "2026-01-01T00:00:00Z")
    _complete_release(data, "r-bbbbbbbbbbbb", "2026-01-02T00:00:00Z")
    os.symlink("releases/r-aaaaaaaaaaaa", data / "current")
    h = sfh.Host(str(data), unit_dir=str(tmp_path / "units"))
    system = FakeSystem()
    monkeypatch.setattr(sfh, "sh", system.sh)
    monkeypatch.setattr(sfh.host_jobs, "sh", system.sh)
    monkeypatch.setattr(sfh.readiness, "sh", system.sh)  # the journal's tail after a failed gate
    (tmp_path / "meminfo").write_text("MemTotal:       127500000 kB\nMemAvailable:    40960000 kB\n")
    monkeypatch.setattr(sfh.readiness, "MEMINFO", str(tmp_path / "meminfo"))  # the model loaded: 40000 MiB left
    smoke_ok = {"r-aaaaaaaaaaaa": True, "r-bbbbbbbbbbbb": True}

    def gate_once(rec, timeout):
        if not smoke_ok[rec["id"]]:
            raise sfh.Fail("smoke completion returned empty text")
        return 0.1, "text"

    monkeypatch.setattr(h, "_gate_once", gate_once)
    return SimpleNamespace(h=h, data=data, system=system, smoke_ok=smoke_ok)


def test_activate_switches_restarts_and_records_the_gate(host):
    host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert host.h.current() == "r-bbbbbbbbbbbb" and host.h.previous() == "r-aaaaaaaaaaaa"
    assert ("systemctl", "restart", "svc.service") in host.system.calls
    assert host.h.gate_state()["release"] == "r-bbbbbbbbbbbb" and host.h.gate_state()["result"] == "passed"


def test_activate_of_the_serving_release_gates_without_restart(host):
    host.h.set_gate("r-aaaaaaaaaaaa", "failed")  # e.g. the controller died mid-gate last time
    (host.h.unit_dir).mkdir()
    (host.h.unit_dir / "svc.service").write_text("svc.service of r-aaaaaaaaaaaa\n")
    host.h.activate("r-aaaaaaaaaaaa", revert=True)
    assert not [c for c in host.system.calls if c[:2] == ("systemctl", "restart")]
    assert host.h.gate_state() | {"at": None} == {"release": "r-aaaaaaaaaaaa", "result": "passed", "at": None, "downtime_s": None,
                                                  "started": None,  # no start marker on this scratch host
                                                  "mem_available_loaded_mib": 40000}  # no drop-caches record yet


def test_a_passed_gate_records_memory_at_the_start_and_once_loaded(host):
    """drop-caches (the unit's ExecStartPre) recorded MemAvailable right after it dropped the page
    cache; the passed gate puts that beside MemAvailable once the model is loaded (a GB10's one pool)."""
    import time
    stale = '{"at": 1, "before_kb": 61440000, "after_kb": 122880000}\n'  # an earlier start's: left out
    (host.data / "mem-at-start.json").write_text(stale)
    host.h.activate("r-aaaaaaaaaaaa", revert=True)
    assert "mem_available_at_start_mib" not in host.h.gate_state() and host.h.gate_state()["result"] == "passed"
    (host.data / "mem-at-start.json").write_text(stale.replace('"at": 1', f'"at": {int(time.time()) + 1}'))
    host.h.activate("r-bbbbbbbbbbbb", revert=True)
    gate = host.h.gate_state()
    assert gate["result"] == "passed" and gate["mem_available_at_start_mib"] == 120000
    assert gate["mem_available_loaded_mib"] == 40000


def test_failed_gate_reverts_to_previous_and_says_so(host):
    host.smoke_ok["r-bbbbbbbbbbbb"] = False
    with pytest.raises(sfh.Fail, match="rolled back to r-aaaaaaaaaaaa, which is serving"):
        host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert host.h.current() == "r-aaaaaaaaaaaa"
    assert host.h.gate_state()["release"] == "r-aaaaaaaaaaaa" and host.h.gate_state()["result"] == "passed"
    assert host.h.previous() is None, "the failed release must not be previous of the restored one"


def test_failed_restart_reverts_like_a_failed_gate(host):
    host.system.fail.add("restart")
    calls = []
    original = host.system.sh

    def restart_fails_once(*cmd, check=True):
        if cmd[:2] == ("systemctl", "restart"):
            calls.append(cmd)
            if len(calls) == 2:  # the revert's restart works (docker is back)
                host.system.fail.discard("restart")
        return original(*cmd, check=check)

    sfh.sh = restart_fails_once  # monkeypatch fixture restores the attribute
    with pytest.raises(sfh.Fail, match=r"failed its readiness gate \(systemctl restart svc.service failed.*rolled back to r-aaaaaaaaaaaa"):
        host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert len(calls) == 2 and host.h.current() == "r-aaaaaaaaaaaa"
    assert host.h.gate_state()["result"] == "passed" and host.h.gate_state()["release"] == "r-aaaaaaaaaaaa"


def test_a_switch_to_a_release_of_another_unit_stops_the_one_that_served_and_a_revert_stops_the_new_one(host):
    """A release of another engine runs as another unit (specfleet-trtllm -> specfleet-vllm): the switch drains and
    stops the unit that served (the current release's, not the new one, which is not running), then starts the new
    one; when the new one fails its gate, the revert stops it and starts the old one again."""
    _complete_release(host.data, "r-cccccccccccc", "2026-01-03T00:00:00Z", service="vllm")
    host.smoke_ok["r-cccccccccccc"] = True
    host.h.activate("r-cccccccccccc", revert=True)
    stop = ("systemctl", "disable", "--now", "svc.service")
    assert stop in host.system.calls and ("docker", "rm", "-f", "svc") in host.system.calls
    assert host.system.calls.index(stop) < host.system.calls.index(("systemctl", "restart", "vllm.service"))
    assert ("systemctl", "is-active", "svc") in host.system.calls[:host.system.calls.index(stop)], \
        "the drain asks about the unit that serves"
    assert host.h.current() == "r-cccccccccccc" and host.h.status()["active"] == "active"
    host.system.calls.clear()
    host.smoke_ok["r-dddddddddddd"] = False
    _complete_release(host.data, "r-dddddddddddd", "2026-01-04T00:00:00Z", service="svc")
    with pytest.raises(sfh.Fail, match="rolled back to r-cccccccccccc"):
        host.h.activate("r-dddddddddddd", revert=True)
    calls = host.system.calls
    assert calls.index(("systemctl", "disable", "--now", "vllm.service")) < calls.index(("systemctl", "restart",
                                                                                          "svc.service"))
    assert calls.index(("systemctl", "disable", "--now", "svc.service")) < len(calls) - 1 - calls[::-1].index(
        ("systemctl", "restart", "vllm.service")), "the revert stops the failed unit before the old one starts"
    assert host.h.current() == "r-cccccccccccc"


def test_without_previous_a_failed_gate_is_recorded(host):
    host.smoke_ok["r-bbbbbbbbbbbb"] = False
    (host.data / "current").unlink()
    with pytest.raises(sfh.Fail, match="failed its readiness gate: smoke"):
        host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert host.h.gate_state()["release"] == "r-bbbbbbbbbbbb" and host.h.gate_state()["result"] == "failed"


def test_unlock_by_id_and_force(tmp_path):
    h = sfh.Host(str(tmp_path))
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "owner").write_text("rollout 1a2b3c4d by ops@ctl pid 42 since 2026-01-01T00:00:00Z\n")
    with pytest.raises(sfh.Fail, match="held by rollout 1a2b3c4d"):
        h.unlock("ffffffff", force=False)
    assert (tmp_path / "lock").exists()
    h.unlock("1a2b3c4d", force=False)
    assert not (tmp_path / "lock").exists()
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "owner").write_text("converge 9 by a@b pid 1 since x\n")
    h.unlock(None, force=True)
    assert not (tmp_path / "lock").exists()


def test_job_run_records_result_log_and_progress(tmp_path, monkeypatch):
    h = sfh.Host(str(tmp_path))
    d = tmp_path / "jobs" / "j1"
    d.mkdir(parents=True)
    script = "import json, os; open(os.environ['SPECFLEET_PROGRESS_FILE'], 'w').write(json.dumps({'kind': 'x'})); print('work'); raise SystemExit(3)"
    (d / "job.json").write_text(json.dumps({"key": "k", "argv": [sys.executable, "-c", script], "env": {}}))
    assert h.jobs.run("j1") == 3
    state = json.loads((d / "state.json").read_text())
    assert state["state"] == "failed" and state["exit"] == 3
    assert "work" in (d / "log").read_text()
    monkeypatch.setattr(sfh.host_jobs, "sh", lambda *c, check=True: subprocess.CompletedProcess(c, 3, "inactive", ""))
    status = h.jobs.status("j1")
    assert status["state"] == "failed" and status["progress"] == {"kind": "x"} and "work" in status["log_tail"]


def test_job_killed_without_a_result_is_lost(tmp_path, monkeypatch):
    h = sfh.Host(str(tmp_path))
    d = tmp_path / "jobs" / "j2"
    d.mkdir(parents=True)
    (d / "job.json").write_text(json.dumps({"key": "fetch:x@y", "argv": ["true"], "env": {}}))
    (d / "state.json").write_text(json.dumps({"state": "running", "pid": 999999}))
    (tmp_path / "jobs" / "active").write_text("j2\n")
    monkeypatch.setattr(sfh.host_jobs, "sh", lambda *c, check=True: subprocess.CompletedProcess(c, 3, "inactive", ""))
    assert h.jobs.status("j2")["state"] == "lost"
    assert h.jobs.active() is None
    monkeypatch.setattr(sfh.host_jobs, "sh", lambda *c, check=True: subprocess.CompletedProcess(c, 0, "active", ""))
    assert h.jobs.status("j2")["state"] == "running" and h.jobs.active() == "j2"


def test_a_job_that_ends_while_its_unit_is_asked_about_is_not_lost(tmp_path, monkeypatch):
    """The race seen on a loaded VM fleet (a rollout's stage said `job ... lost: ended without a result (unit
    inactive)` while the job's log ended `ok (exit 0)`): the status read saw `running`, then the job recorded its
    result and its unit went away before `systemctl is-active` answered. Here the job ends exactly then."""
    h = sfh.Host(str(tmp_path))
    d = tmp_path / "jobs" / "j3"
    d.mkdir(parents=True)
    (d / "job.json").write_text(json.dumps({"key": "fetch:x@y", "argv": ["true"], "env": {}}))
    (d / "state.json").write_text(json.dumps({"state": "running", "pid": 999999}))

    def systemctl_while_the_job_ends(*cmd, check=True):
        (d / "state.json").write_text(json.dumps({"state": "ok", "exit": 0}))  # the job's last act, then it is gone
        return subprocess.CompletedProcess(cmd, 3, "inactive", "")

    monkeypatch.setattr(sfh.host_jobs, "sh", systemctl_while_the_job_ends)
    status = h.jobs.status("j3")
    assert status["state"] == "ok" and status["exit"] == 0, status


def test_the_controllers_job_start_command_parses_as_intended():
    import shlex as _shlex

    from specfleet.fleet.steps.jobs import start_command
    argv = ["/v/bin/python", "/d/bin/fetch-model", "--repo", "org/m", "--ignore", "original/*", "--env", "x"]
    cmd = start_command("/d/bin/specfleet-host --data-dir /d", "fetch:org/m@abc", argv,
                        {"HF_ENDPOINT": "http://h:1", "HF_TOKEN_PATH": "/etc/specfleet/hf_token"})
    args = sfh.build_parser().parse_args(_shlex.split(cmd)[1:])
    assert (args.cmd, args.job_cmd, args.key) == ("job", "start", "fetch:org/m@abc")
    assert args.env == ["HF_ENDPOINT=http://h:1", "HF_TOKEN_PATH=/etc/specfleet/hf_token"]
    assert sfh.job_argv(args) == argv


def test_a_damaged_release_json_is_a_clear_failure_not_a_traceback(host):
    (host.data / "releases" / "r-bbbbbbbbbbbb" / "release.json").write_text("")
    with pytest.raises(sfh.Fail, match="release r-bbbbbbbbbbbb is damaged .* the next converge rewrites it"):
        host.h.activate("r-bbbbbbbbbbbb", revert=True)
    assert host.h.current() == "r-aaaaaaaaaaaa", "nothing switched"


def test_job_status_wait_answers_as_soon_as_the_job_ends(tmp_path, monkeypatch, capsys):
    d = tmp_path / "jobs" / "j4"
    d.mkdir(parents=True)
    (d / "job.json").write_text(json.dumps({"key": "activate:r-x", "argv": ["true"], "env": {}}))
    (d / "state.json").write_text(json.dumps({"state": "running", "pid": 999999}))
    asked = []

    def systemctl(*cmd, check=True):
        asked.append(cmd)
        if len(asked) == 3:  # the job ends while the third read waits
            (d / "state.json").write_text(json.dumps({"state": "ok", "exit": 0}))
            return subprocess.CompletedProcess(cmd, 3, "inactive", "")
        return subprocess.CompletedProcess(cmd, 0, "active", "")

    monkeypatch.setattr(sfh.host_jobs, "sh", systemctl)
    assert sfh.main(["--data-dir", str(tmp_path), "job", "status", "j4", "--wait", "30"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "ok" and len(asked) == 3, (status, asked)


def test_poll_until_gives_the_last_read_after_the_wait():
    from specfleet.host.hostlib import poll_until
    now = [0.0]
    reads = []

    def read():
        reads.append(now[0])
        return {"state": "running", "n": len(reads)}

    value = poll_until(read, lambda st: st["state"] != "running", 10.0, every=0.25, clock=lambda: now[0],
                       sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert value == {"state": "running", "n": 41} and reads[-1] == 10.0, (value, reads[-3:])
    assert poll_until(read, lambda st: True, 10.0, clock=lambda: now[0], sleep=None)["n"] == 42  # done: no sleep


def test_activate_prunes_once_its_gate_passed_and_never_after_a_failed_gate(host, monkeypatch):
    """`activate ID --revert --prune N` (serving/steps/service.py's one job): old releases go once the gate passed."""
    _complete_release(host.data, "r-cccccccccccc", "2025-12-01T00:00:00Z")  # older than both
    monkeypatch.setattr(sfh.Host, "_gate_once", lambda self, rec, timeout: host.h._gate_once(rec, timeout))
    argv = ["--data-dir", str(host.data), "activate", "r-bbbbbbbbbbbb", "--revert", "--prune", "2"]
    host.smoke_ok["r-bbbbbbbbbbbb"] = False
    monkeypatch.setattr(sfh.Host.__init__, "__defaults__", (str(host.h.unit_dir),))  # never /etc/systemd/system
    assert sfh.main(argv) == 1
    assert (host.data / "releases" / "r-cccccccccccc").is_dir() and host.h.current() == "r-aaaaaaaaaaaa"
    host.smoke_ok["r-bbbbbbbbbbbb"] = True
    assert sfh.main(argv) == 0
    assert sorted(p.name for p in (host.data / "releases").iterdir()) == ["r-aaaaaaaaaaaa", "r-bbbbbbbbbbbb"]
    assert host.h.current() == "r-bbbbbbbbbbbb" and host.h.gate_state()["result"] == "passed"


def test_a_job_starts_once_a_second_start_of_its_key_attaches_and_another_key_is_busy(tmp_path, monkeypatch):
    """host_jobs.Jobs.start: one job at a time (a transient unit by systemd-run); the same key again attaches to it
    (a controller that lost its SSH connection and runs again), another key is told busy, naming the running one."""
    calls = []

    def sh(*cmd, check=True):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "active" if cmd[0] == "systemctl" else "", "")

    monkeypatch.setattr(sfh.host_jobs, "sh", sh)
    h = sfh.Host(str(tmp_path))
    first = h.jobs.start("fetch:org/m@abc", ["true"], {"K": "v"})
    assert first["state"] == "started" and h.jobs.active() == first["id"]
    assert h.jobs.start("fetch:org/m@abc", ["true"], {}) == {"id": first["id"], "state": "attached"}
    assert h.jobs.start("pull:img", ["true"], {}) == {"id": first["id"], "state": "busy", "key": "fetch:org/m@abc"}
    runs = [c for c in calls if c[0] == "systemd-run"]
    assert len(runs) == 1 and runs[0][-3:] == ("job", "run", first["id"]), runs
    assert runs[0][-6] == os.path.abspath(sfh.__file__)  # the host tool runs the job's unit, not host_jobs.py
