"""A pair's switch, driven by the head's host job (pair/host/pair_switch.py), on two scratch hosts of this machine:
the head's host tool in this process (systemctl and docker simulated, the gate's probe stubbed), and the worker's
installed host programs run for real as a separate process: the head's pair agent here hands its command to the
worker's installed pair gate, as the worker's sshd would (the agent itself over a real sshd: test_pair_ssh.py),
and the worker's host tool switches the worker with stand-in systemctl and docker on its PATH. Each test ends with
what each host serves afterwards: the head's current release and gate, the worker's current release and container.

What a controller killed midway changes: nothing here. The head's job is the one process that drives both hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specfleet.host.layout import HOST_PROGRAMS, PAIR_AGENT_FILE, PAIR_GATE_TOOL, PAIR_SWITCH_KEY_ENV, Layout
from specfleet.serving.host import specfleet_host as sfh
from tests.unit.installed import source as source_of
from tests.unit.test_host_tool import FakeSystem, _complete_release

# the worker's host tool writes its unit to /etc/systemd/system: it runs in a mount namespace of its own (root)
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the worker runs in a mount namespace (CI is root)")
HEAD = ("r-aaaaaaaaaaaa", "r-bbbbbbbbbbbb")  # the head's releases A and B
WORKER = ("r-0000000000a0", "r-0000000000b0")  # their worker releases

# The worker's systemctl and docker: one JSON state file (unit state, running, the release its unit holds), every
# call appended to the shared event log the head's calls go to as well, so the test reads one order of events.
FAKE = textwrap.dedent('''\
    #!{python}
    import json, os, sys
    state_file, log = os.environ["FAKE_STATE"], os.environ["FAKE_LOG"]
    st = json.load(open(state_file))
    name, args = os.path.basename(sys.argv[0]), sys.argv[1:]
    with open(log, "a") as f:
        f.write("worker: " + " ".join([name] + args) + "\\n")
    out, rc = "", 0
    if name == "systemctl" and args[0] == "is-active":
        out = st["active"]
    elif name == "systemctl" and args[0] == "is-enabled":
        out = "enabled"
    elif name == "systemctl" and args[0] == "restart":
        holds = os.path.basename(os.path.realpath(os.environ["FAKE_DATA"] + "/current"))
        if holds in st.get("fail", []):
            st["active"], rc = "failed", 1
        else:
            st.update(active="active", holds=holds, starts=st.get("starts", 0) + 1)
    elif name == "docker" and args[:3] == ["inspect", "--format", "{{{{.State.Running}}}}"]:
        out = "true" if st["active"] == "active" else "false"
    json.dump(st, open(state_file, "w"))
    print(out)
    sys.exit(rc)
''')


class HeadSystem(FakeSystem):
    """The head's systemctl/docker (test_host_tool's), its calls in the shared event log."""

    def __init__(self, log: Path):
        super().__init__()
        self.log = log

    def sh(self, *cmd, check=True):
        if cmd[0] in ("systemctl", "docker") and cmd[1] not in ("is-active", "is-enabled", "show", "inspect"):
            with self.log.open("a") as f:
                f.write("head: " + " ".join(cmd) + "\n")
        if cmd[:2] == ("systemctl", "stop"):
            self.active = "inactive"
        return super().sh(*cmd, check=check)


def _worker_release(data: Path, rid: str, created: str) -> None:
    _complete_release(data, rid, created)
    record = json.loads((data / "releases" / rid / "release.json").read_text())
    record["pair"] = {"role": "worker", "name": "pair_a", "head": "spark-1", "keep_releases": 2}
    (data / "releases" / rid / "release.json").write_text(json.dumps(record))


def _head_release(data: Path, rid: str, created: str, worker_rid: str) -> None:
    _complete_release(data, rid, created)
    record = json.loads((data / "releases" / rid / "release.json").read_text())
    record["pair"] = {"role": "head", "name": "pair_a", "worker": {
        "host": "spark-2", "address": "192.168.100.11", "port": 22, "login": "specfleet-mpi", "release": worker_rid}}
    (data / "releases" / rid / "release.json").write_text(json.dumps(record))


@pytest.fixture
def pair(tmp_path, monkeypatch):
    """Both hosts serving A (head A, worker A, its container up), B staged on both."""
    head, worker, log = tmp_path / "head", tmp_path / "worker", tmp_path / "events.log"
    for i, created in enumerate(("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")):
        _head_release(head, HEAD[i], created, WORKER[i])
        _worker_release(worker, WORKER[i], created)
    os.symlink(f"releases/{HEAD[0]}", head / "current")
    os.symlink(f"releases/{WORKER[0]}", worker / "current")
    # the worker's installed programs (as steps/tools and steps/pair install them), and its stand-in commands
    (worker / "bin").mkdir()
    for name, source in {**HOST_PROGRAMS, PAIR_GATE_TOOL: "pair_gate.py"}.items():
        (worker / "bin" / name).write_text(source_of(source).read_text())
        (worker / "bin" / name).chmod(0o755)
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    for name in ("systemctl", "docker", "journalctl"):
        (fake_bin / name).write_text(FAKE.format(python=sys.executable))
        (fake_bin / name).chmod(0o755)
    state, units = tmp_path / "worker-state.json", tmp_path / "worker-units"
    units.mkdir()
    (units / "svc.service").write_text(f"svc.service of {WORKER[0]}\n")  # the worker serves A
    state.write_text(json.dumps({"active": "active", "holds": WORKER[0]}))
    # what runs on the worker runs with its stand-in commands, and its unit directory is its own: a mount
    # namespace with a scratch dir over /etc/systemd/system (this machine's is never written)
    on_worker = tmp_path / "on-worker"
    on_worker.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        export PATH={fake_bin}:/usr/bin:/bin FAKE_STATE={state} FAKE_LOG={log} FAKE_DATA={worker}
        exec unshare --mount --propagation private sh -c 'mount --bind "$0" /etc/systemd/system && exec "$@"' \\
            {units} "$@"
        '''))
    on_worker.chmod(0o755)
    # the head's pair agent: what reaches the worker's sshd reaches the gate line of the key it came with, as the
    # worker's authorized_keys maps them (pair_files.authorized_keys): the switch key's, or else the MPI key's
    (head / "pair").mkdir()
    agent = head / "pair" / PAIR_AGENT_FILE
    agent.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        host=$1; shift
        echo "agent: $SPECFLEET_PAIR_USER@$host:$SPECFLEET_PAIR_PORT $*" >> {log}
        gate="--container svc --agent x"
        [ "${{{PAIR_SWITCH_KEY_ENV}:-}}" = "{Layout(str(head)).pair_switch_key}" ] && gate="--switch"
        SSH_ORIGINAL_COMMAND="$*" exec {on_worker} {sys.executable} {worker}/bin/{PAIR_GATE_TOOL} $gate
        '''))
    agent.chmod(0o755)
    h = sfh.Host(str(head), unit_dir=str(tmp_path / "units"))
    system = HeadSystem(log)
    monkeypatch.setattr(sfh, "sh", system.sh)
    monkeypatch.setattr(sfh.host_jobs, "sh", system.sh)
    monkeypatch.setattr(sfh.readiness, "sh", system.sh)
    smoke_ok = {HEAD[0]: True, HEAD[1]: True}

    def gate_once(rec, timeout):
        if not smoke_ok[rec["id"]]:
            raise sfh.Fail("smoke completion returned empty text")
        return 0.1, "text"

    monkeypatch.setattr(h, "_gate_once", gate_once)

    class World:
        def events(self) -> list[str]:
            """The agent's calls and every stop and restart, on both hosts, in order."""
            lines = log.read_text().splitlines() if log.exists() else []
            return [e for e in lines if e.startswith("agent: ") or e.split()[1:3] in (["systemctl", "stop"],
                                                                                       ["systemctl", "restart"])]

        def worker_state(self) -> dict:
            return json.loads(state.read_text())

        def worker_current(self) -> str:
            return os.path.basename(os.path.realpath(worker / "current"))

        def worker_unit(self) -> str:
            return (units / "svc.service").read_text()

        def worker_gate(self) -> dict:
            return json.loads((worker / "gate.json").read_text())

        def fail_worker(self, rid: str) -> None:
            state.write_text(json.dumps({**self.worker_state(), "fail": [rid]}))

    world = World()
    world.h, world.system, world.smoke_ok, world.head, world.worker = h, system, smoke_ok, head, worker
    world.on_worker = on_worker
    return world


def test_the_heads_job_stops_its_launch_switches_the_worker_then_starts_and_gates(pair):
    pair.h.activate(HEAD[1], revert=True)
    assert pair.events() == [
        "head: systemctl stop svc.service",  # the launch first: the worker's rank ends with it
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host activate {WORKER[1]} --pair-worker",
        "worker: systemctl restart svc.service",
        "head: systemctl restart svc.service",  # then the launch, into the worker's new container
    ]
    assert pair.h.current() == HEAD[1] and pair.h.gate_state()["result"] == "passed"
    assert pair.worker_current() == WORKER[1] and pair.worker_state() | {"starts": 0} == {
        "active": "active", "holds": WORKER[1], "starts": 0}
    assert pair.worker_gate()["release"] == WORKER[1] and pair.worker_gate()["result"] == "passed"
    assert pair.worker_gate()["role"] == "worker" and pair.worker_unit() == f"svc.service of {WORKER[1]}\n"
    assert not Path("/etc/systemd/system/svc.service").exists()  # the worker's unit went to its own directory


def test_a_worker_that_cannot_start_reverts_both_hosts_to_the_previous_release(pair):
    pair.fail_worker(WORKER[1])
    with pytest.raises(sfh.Fail, match=rf"the worker spark-2 did not switch to {WORKER[1]}: .*rolled back to "
                                       rf"{HEAD[0]}, which is serving"):
        pair.h.activate(HEAD[1], revert=True)
    events = pair.events()
    assert events[-4:] == [
        "head: systemctl stop svc.service",
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host activate {WORKER[0]} --pair-worker",
        "worker: systemctl restart svc.service",
        "head: systemctl restart svc.service",
    ], events
    assert pair.h.current() == HEAD[0] and pair.h.gate_state() | {"at": None} == {
        "release": HEAD[0], "result": "passed", "at": None, "detail": f"rolled back: {HEAD[1]} failed its gate",
        "started": None}
    assert pair.worker_current() == WORKER[0] and pair.worker_state()["holds"] == WORKER[0]
    assert pair.worker_state()["active"] == "active"


def test_a_failed_gate_on_the_head_switches_the_worker_back_first(pair):
    pair.smoke_ok[HEAD[1]] = False
    with pytest.raises(sfh.Fail, match=rf"rolled back to {HEAD[0]}, which is serving"):
        pair.h.activate(HEAD[1], revert=True)
    asked = [e.split()[-2] for e in pair.events() if e.startswith("agent: ")]
    assert asked == [WORKER[1], WORKER[0]]
    assert pair.h.current() == HEAD[0] and pair.h.gate_state()["result"] == "passed"
    assert pair.worker_current() == WORKER[0] and pair.worker_state() | {"starts": 0} == {
        "active": "active", "holds": WORKER[0], "starts": 0}


def test_a_worker_container_found_down_is_started_and_the_launch_with_it(pair):
    """The head serves its release and needs no restart; the worker's container is down (killed, a reboot): the
    head's job starts it through the worker, then starts its launch again (no stop: it was not serving)."""
    (pair.h.unit_dir).mkdir()
    (pair.h.unit_dir / "svc.service").write_text(f"svc.service of {HEAD[0]}\n")
    (pair.worker.parent / "worker-state.json").write_text(json.dumps(pair.worker_state() | {"active": "inactive"}))
    pair.h.activate(HEAD[0], revert=True)
    assert pair.events() == [
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host activate {WORKER[0]} --pair-worker",
        "worker: systemctl restart svc.service",
        "head: systemctl restart svc.service",
    ]
    assert pair.h.gate_state()["result"] == "passed" and pair.worker_state()["active"] == "active"


def test_a_pair_already_serving_gates_again_and_restarts_nothing(pair):
    (pair.h.unit_dir).mkdir()
    (pair.h.unit_dir / "svc.service").write_text(f"svc.service of {HEAD[0]}\n")
    pair.h.activate(HEAD[0], revert=True)
    events = pair.events()
    assert not [e for e in events if " restart " in e or " stop " in e], events
    assert pair.h.gate_state()["result"] == "passed" and pair.worker_current() == WORKER[0]


def test_a_worker_release_is_only_activated_by_its_heads_switch(pair):
    worker = sfh.Host(str(pair.worker), unit_dir=str(pair.worker.parent / "worker-units"))
    with pytest.raises(sfh.Fail, match=r"a pair worker's: its head's switch activates it \(--pair-worker\)"):
        worker.activate(WORKER[1], revert=True)
    head_tool = subprocess.run(  # on the worker's stand-ins, so a regression could not reach this machine's systemd
        [str(pair.on_worker), sys.executable, str(pair.worker / "bin" / "specfleet-host"), "--data-dir",
         str(pair.head), "activate", HEAD[1], "--pair-worker"], capture_output=True, text=True, timeout=60)
    assert head_tool.returncode == 1 and "is not a pair worker's release" in head_tool.stderr
    assert pair.h.current() == HEAD[0] and pair.worker_current() == WORKER[0]


def test_a_passed_worker_side_prunes_the_workers_old_releases(pair):
    """The worker's converge starts no job, so its side of the switch prunes (keep_releases from its release)."""
    _worker_release(pair.worker, "r-0000000000c0", "2025-12-01T00:00:00Z")  # older than A and B
    pair.h.activate(HEAD[1], revert=True)
    assert sorted(p.name for p in (pair.worker / "releases").iterdir()) == sorted(WORKER)
    assert pair.worker_current() == WORKER[1]


def test_an_agent_that_cannot_run_fails_the_switch_with_a_line_and_never_leaves_the_gate_running(pair):
    (pair.head / "pair" / PAIR_AGENT_FILE).unlink()  # e.g. the trust step failed, or a cleanup ran
    with pytest.raises(sfh.Fail, match=r"cannot run the pair agent .*rollback to r-aaaaaaaaaaaa ALSO failed: "
                                       r"cannot run the pair agent"):
        pair.h.activate(HEAD[1], revert=True)
    assert pair.h.gate_state()["result"] == "failed"  # said, not left `running` for the gateways
    assert pair.worker_current() == WORKER[0] and pair.worker_state()["active"] == "active"  # untouched


def test_a_second_switch_of_the_worker_waits_for_the_first_and_gives_up_with_a_line(pair, monkeypatch):
    """A head that gave up waiting reverts and asks again while its first ask still runs on the worker: the second
    waits on the worker's switch lock instead of racing it (here it is held, and the wait bounded to 1 s)."""
    import fcntl

    worker = sfh.Host(str(pair.worker), unit_dir=str(pair.worker.parent / "worker-units"))
    monkeypatch.setattr(sfh.pair_switch, "LOCK_SEC", 1)
    with open(Layout(str(pair.worker)).pair_switch_lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(sfh.Fail, match="another switch of this host still runs after 1s"):
            sfh.pair_switch.hold(worker, WORKER[1])
    assert pair.worker_current() == WORKER[0] and not (pair.worker / "gate.json").exists()


SOLO = ("r-5010000000a0", "r-5010000000b0")  # what the head and the worker served alone before the pair


@pytest.fixture
def first_pair(pair):
    """Two Sparks that served alone (the head SOLO[0], the worker SOLO[1], each its own single release, gated by
    its own readiness gate) with the pair's first release staged on both (the head's HEAD[1], the worker's
    WORKER[1]); the worker's single release answers its gate from a stand-in server on this machine's loopback."""
    import http.server
    import threading

    class Serving(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self._answer(b"ok")

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer(json.dumps({"choices": [{"text": "alone again"}]}).encode())

        def _answer(self, body):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serving)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _complete_release(pair.head, SOLO[0], "2025-12-01T00:00:00Z")
    _complete_release(pair.worker, SOLO[1], "2025-12-01T00:00:00Z")
    record = pair.worker / "releases" / SOLO[1] / "release.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "url": f"http://127.0.0.1:{server.server_port}"}))
    for host, rid in ((pair.head, SOLO[0]), (pair.worker, SOLO[1])):
        (host / "current").unlink()
        os.symlink(f"releases/{rid}", host / "current")
    (pair.worker.parent / "worker-state.json").write_text(json.dumps({"active": "active", "holds": SOLO[1]}))
    pair.smoke_ok[SOLO[0]] = True
    yield pair
    server.shutdown()


def test_a_failed_first_pair_release_sends_each_host_back_to_serving_alone(first_pair):
    pair = first_pair
    pair.smoke_ok[HEAD[1]] = False
    with pytest.raises(sfh.Fail, match=rf"rolled back to {SOLO[0]}, which is serving; the worker spark-2 serves "
                                       rf"{SOLO[1]} alone again"):
        pair.h.activate(HEAD[1], revert=True)
    assert pair.events() == [
        "head: systemctl stop svc.service",
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host activate {WORKER[1]} --pair-worker",
        "worker: systemctl restart svc.service",
        "head: systemctl restart svc.service",  # the pair's launch: its gate fails
        "head: systemctl restart svc.service",  # the head's own release (the launch stops with it), gated
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host leave-pair {WORKER[1]}",  # then the worker
        "worker: systemctl restart svc.service",  # the worker's own release, gated on the worker
    ]
    assert pair.h.current() == SOLO[0] and pair.h.gate_state()["result"] == "passed"
    assert pair.worker_current() == SOLO[1] and pair.worker_state()["holds"] == SOLO[1]
    assert pair.worker_gate()["release"] == SOLO[1] and pair.worker_gate()["result"] == "passed"
    assert "role" not in pair.worker_gate()  # gated as a single Spark's release, not as a pair's side
    assert pair.worker_unit() == f"svc.service of {SOLO[1]}\n"
    assert not (pair.worker / "previous").exists()  # the failed pair release is not the worker's previous


def test_a_worker_that_cannot_serve_alone_again_is_named_and_the_head_serves_its_own(first_pair):
    pair = first_pair
    pair.smoke_ok[HEAD[1]] = False
    pair.fail_worker(SOLO[1])  # the worker's own release no longer starts
    with pytest.raises(sfh.Fail, match=rf"rolled back to {SOLO[0]}, which is serving; the worker spark-2 did not "
                                       rf"go back to serving alone: .*{SOLO[1]}"):
        pair.h.activate(HEAD[1], revert=True)
    assert pair.h.current() == SOLO[0] and pair.h.gate_state()["result"] == "passed"
    assert pair.worker_gate()["release"] == SOLO[1] and pair.worker_gate()["result"] == "failed"
    assert pair.worker_state()["active"] == "failed"  # said, not hidden: its unit failed


def test_leave_pair_is_refused_for_a_worker_that_never_served_alone(pair):
    worker = sfh.Host(str(pair.worker), unit_dir=str(pair.worker.parent / "worker-units"))
    with pytest.raises(sfh.Fail, match=f"nothing to go back to: this worker served no release of its own before "
                                       f"{WORKER[0]}"):
        sfh.pair_switch.leave(worker, WORKER[0])
    with pytest.raises(sfh.Fail, match="not a pair worker's release"):  # a head's release, on the head
        sfh.pair_switch.leave(sfh.Host(str(pair.head), unit_dir=str(pair.worker.parent / "u")), HEAD[0])
    assert pair.worker_current() == WORKER[0] and pair.worker_state()["holds"] == WORKER[0]


def test_a_rollback_from_the_pairs_first_release_sends_the_worker_back_to_serving_alone(first_pair):
    """The pair's first release passed and serves; a rollback (the rollback deploy's `activate PREVIOUS`) returns the
    head to its single release, and the worker, asked once the head serves, to its own."""
    pair = first_pair
    pair.h.activate(HEAD[1], revert=True)
    assert pair.h.current() == HEAD[1] and pair.worker_current() == WORKER[1]
    pair.h.activate(SOLO[0], revert=True, rollback=True)
    assert pair.events()[-3:] == [
        "head: systemctl restart svc.service",
        f"agent: specfleet-mpi@192.168.100.11:22 specfleet-host leave-pair {WORKER[1]}",
        "worker: systemctl restart svc.service"]
    assert pair.h.current() == SOLO[0] and pair.h.gate_state()["result"] == "passed"
    assert pair.worker_current() == SOLO[1] and pair.worker_gate()["result"] == "passed"


def test_a_worker_that_never_staged_the_pair_release_answers_what_it_serves(first_pair):
    """Its stage failed, so it never had the pair's release: it still serves alone, and says which."""
    pair = first_pair
    import shutil
    shutil.rmtree(pair.worker / "releases" / WORKER[1])
    worker = sfh.Host(str(pair.worker), unit_dir=str(pair.worker.parent / "worker-units"))
    (pair.worker.parent / "worker-units" / "svc.service").write_text(
        (pair.worker / "releases" / SOLO[1] / "svc.service").read_text())
    assert sfh.pair_switch.leave(worker, WORKER[1]) == {"release": SOLO[1]}
    assert pair.worker_current() == SOLO[1] and pair.worker_state()["holds"] == SOLO[1]


def test_a_switch_from_the_pair_to_a_new_single_release_leaves_the_worker_to_its_own_converge(first_pair):
    """A converge that dissolved the pair activates a NEW single release on the head (not a rollback to the one
    before the pair): the former worker is converged by its own job, so the head does not switch it too."""
    pair = first_pair
    pair.h.activate(HEAD[1], revert=True)
    _complete_release(pair.head, "r-5010000000c0", "2025-12-03T00:00:00Z")
    pair.smoke_ok["r-5010000000c0"] = True
    pair.h.activate("r-5010000000c0", revert=True)
    assert pair.h.current() == "r-5010000000c0" and pair.h.gate_state()["result"] == "passed"
    assert not any("leave-pair" in e for e in pair.events())
    assert pair.worker_current() == WORKER[1]  # untouched: its own converge switches it


def test_a_converge_back_to_the_release_before_the_pair_is_no_rollback(first_pair):
    """The pair left the fleet file and nothing else changed: the head's converge renders the release it served
    before the pair (a content hash) and activates it, as a converge (no --rollback): the worker's own converge
    switches it, so the head does not."""
    pair = first_pair
    pair.h.activate(HEAD[1], revert=True)
    pair.h.activate(SOLO[0], revert=True)
    assert pair.h.current() == SOLO[0] and pair.h.gate_state()["result"] == "passed"
    assert not any("leave-pair" in e for e in pair.events())
    assert pair.worker_current() == WORKER[1]


def test_a_worker_running_its_own_activate_job_is_not_switched_beside_it(first_pair, monkeypatch):
    """The worker's own converge runs an activate job (it is no pair worker there any more): `leave` answers what it
    serves and names that job, instead of a second switch racing it."""
    pair = first_pair
    pair.h.activate(HEAD[1], revert=True)
    worker = sfh.Host(str(pair.worker), unit_dir=str(pair.worker.parent / "worker-units"))
    (worker.jobs.dir / "20261128-000000-abcdef").mkdir(parents=True)
    (worker.jobs.dir / "20261128-000000-abcdef" / "job.json").write_text(json.dumps({"key": "activate:r-5010000000d0"}))
    monkeypatch.setattr(sfh.host_jobs.Jobs, "active", lambda self: "20261128-000000-abcdef")
    before = list(pair.events())
    assert sfh.pair_switch.leave(worker, WORKER[1]) == {"release": WORKER[1], "own_job": "activate:r-5010000000d0"}
    assert pair.events() == before and pair.worker_current() == WORKER[1]
