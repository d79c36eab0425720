"""A two-Spark pair's switch, driven by the head's host job (stdlib; installed next to the host tool, which
imports it). The pair serves one release, the head's: its release.json's `pair` section names the worker and the
worker's own release, which the head's release id covers (plan.Rendered). So the one job on the head that
activates it also switches the worker, and a controller that dies midway changes nothing:

1. the head stops its launch (mpirun): the worker's rank, an orted in the worker's container, ends with it;
2. it asks the worker, with the head's switch key through the pair agent (the worker's host key pinned), for
   `specfleet-host activate ID --pair-worker` (Layout.pair_worker_words), the one command the switch key's gate
   lets through (the switch key stays on the head's host: the serving container has only the MPI key). The worker
   takes its switch lock, installs its release, (re)starts its container (the rank holder) unless it already runs
   it, waits until it runs, prunes, and answers with one JSON line;
3. the head starts its launch, and the readiness gate runs on the head (/health, the smoke completion: both ranks).

A failed step or gate reverts the same way (the head's `previous` release names its own worker release): the
worker is switched back first, then the head. Start order: worker, then head; stop order: head, then worker. A
worker found down while the head needs no restart (its container killed, a reboot: the world had ended with its
rank) is started, then the head's launch again. A pair's first release (the head's previous release is a single
Spark's) reverts each host to what it served alone: the head starts its own previous release (its launch stops with
that restart) and gates it, then asks the worker for `specfleet-host leave-pair ID` (`leave`: the worker activates
the release it served before, gated as any single Spark's). A rollback from the pair's release to the head's single
release before it does the same once the head serves."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import time

from hostlib import Fail, read_json, say, sh
from layout import PAIR_AGENT_ENV, PAIR_LEAVE_CMD, PAIR_SWITCH_KEY_ENV

HOLD_SEC = 120  # how long the worker waits for its container to run after a (re)start
LOCK_SEC = 60  # how long a worker's switch waits for another one still running (the head's previous ask)
# how long the head waits for the worker's answer: the worker's lock wait, its unit's stop (TimeoutStopSec=90) and
# start (TimeoutStartSec=120), its own wait, and the SSH connection, with a margin
WORKER_ANSWER_SEC = LOCK_SEC + 90 + 120 + HOLD_SEC + 30


def role(rec: dict) -> str | None:
    """`head` or `worker` for a pair's release, None for a single Spark's."""
    return (rec.get("pair") or {}).get("role")


def switch_worker(layout, rec: dict) -> bool:
    """Ask the worker to activate the worker release of the head's release `rec`; whether it (re)started its
    container. Fail, naming the worker, when it refuses, fails or does not answer."""
    name, rid = _worker(rec)
    say(f"asking the worker {name} to activate {rid}")
    answer = _ask_worker(layout, rec, layout.pair_worker_words(rid), f"did not switch to {rid}")
    if answer.get("release") != rid:
        raise Fail(f"the worker {name} did not switch to {rid}: it answered {answer.get('release')!r}")
    say(f"the worker {name} runs {rid}" + (" (its container started again)" if answer.get("restarted") else ""))
    return bool(answer.get("restarted"))


def leaves_pair(rec: dict, other: dict) -> bool:
    """Whether going from release `rec` to `other` on a head ends the pair: `rec` a pair's head release, `other` a
    single Spark's (a failed first pair release reverted, a rollback to before the pair)."""
    return role(rec) == "head" and role(other) is None


def after_rollback(host, old: str, rec: dict) -> None:
    """After a passed rollback of a head from release `old` to `rec` (the release it served before `old`): when
    `old` was the pair's and `rec` a single Spark's, the worker serves alone again too (`leave_note`). Any other
    switch from a pair's release (a converge that dissolved the pair) leaves the worker to its own converge."""
    try:
        old_rec = host.record(old)
    except Fail as exc:  # the gate passed: an unreadable old record costs the leave (said), never the switch
        say(f"warning: cannot read {old} to tell whether the worker must leave the pair: {exc}", err=True)
        return
    if leaves_pair(old_rec, rec):
        say(leave_note(host.layout, old_rec).lstrip("; "))


def leave_note(layout, rec: dict) -> str:
    """Ask the worker of the pair's release `rec` to serve alone again (`leave`), once the head serves its own
    release: the worker's gate may take as long as a model load, and the head is not kept down meanwhile. What to
    add to the head's line: where the worker ended up, or why it did not (the head's own outcome stands)."""
    name, rid = _worker(rec)
    say(f"asking the worker {name} to leave the pair ({rid}) and serve its own release again", err=True)
    gate = rec.get("gate") or {}
    wait = WORKER_ANSWER_SEC + int(gate.get("health_timeout_sec", 1800)) + int(gate.get("smoke_timeout_sec", 600))
    try:
        answer = _ask_worker(layout, rec, layout.pair_leave_words(rid), "did not go back to serving alone", wait)
    except Fail as exc:
        return f"; {exc}"
    if answer.get("own_job"):
        return f"; the worker {name} serves {answer.get('release')}, and its own job {answer['own_job']} switches it"
    return f"; the worker {name} serves {answer.get('release')} alone again"


def _worker(rec: dict) -> tuple[str, str]:
    worker = (rec.get("pair") or {}).get("worker") or {}
    if not all(worker.get(k) for k in ("host", "release", "address", "login", "port")):
        raise Fail(f"release {rec['id']}'s release.json names no complete pair worker (host, release, address, "
                   "login, port)")
    return worker["host"], worker["release"]


def _ask_worker(layout, rec: dict, words: list[str], failed: str, wait: float = WORKER_ANSWER_SEC) -> dict:
    """Run `words` on the worker with the head's switch key through the pair agent (its host key pinned); its
    answer, one JSON line. Fail (`the worker NAME <failed>: why`) when it refuses, fails or does not answer."""
    worker = rec["pair"]["worker"]
    name, address, login, port = (worker[k] for k in ("host", "address", "login", "port"))
    argv = [layout.pair_agent, address, *words]
    env = {**os.environ, **dict(zip(PAIR_AGENT_ENV, (login, str(port)))), PAIR_SWITCH_KEY_ENV: layout.pair_switch_key}
    try:
        proc = subprocess.run(argv, env=env, text=True, capture_output=True, timeout=wait, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Fail(f"the worker {name} {failed}: no answer within {wait:.0f}s") from None
    except OSError as exc:
        raise Fail(f"cannot run the pair agent {layout.pair_agent}: {exc}") from None
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        say(f"  {name}: {line}")
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if proc.returncode != 0 or not isinstance(answer, dict):
        why = ((proc.stderr or proc.stdout).strip().splitlines() or ["no answer"])[-1]
        raise Fail(f"the worker {name} {failed}: {why}")
    return answer


def hold(host, rid: str) -> dict:
    """The worker's side: install release `rid` and (re)start its container unless it already runs it, then wait
    until the container runs. Recorded in its gate.json (role worker); the answer the head reads."""
    rec = host.record(rid)
    if role(rec) != "worker":
        raise Fail(f"release {rid} is not a pair worker's release (--pair-worker activates only those)")
    host.check_complete(rec)
    with one_switch_at_a_time(host.layout):
        restart = host.restart_needed(rec)
        host.set_gate(rid, "running", role="worker")
        try:
            host.install(rec)
            if restart:
                sh("systemctl", "reset-failed", f"{rec['service']}.service", check=False)
                sh("systemctl", "restart", f"{rec['service']}.service")
            wait_running(rec["service"], HOLD_SEC)
        except Exception as exc:  # recorded whatever it was: the head reads a failed side, never a running one
            host.set_gate(rid, "failed", role="worker", detail=str(exc))
            raise exc if isinstance(exc, Fail) else Fail(f"{type(exc).__name__}: {exc}") from None
        host.set_gate(rid, "passed", role="worker")
    keep = rec["pair"].get("keep_releases")
    if keep:  # the worker's converge starts no job: its side of the switch prunes, as the head's job does
        prune_quietly(host, keep)
    return {"release": rid, "restarted": restart}


def leave(host, rid: str) -> dict:
    """The worker's side of the head's revert of a failed first pair release `rid` (the worker's): serve alone
    again. The release to go back to is the one it served before `rid` (`previous`, when `rid` is current; the
    current one, when the switch never installed `rid`); activated as any single Spark's release (install, restart
    unless it serves it, the readiness gate), and `rid` is then no longer its `previous`. Fail when there is no
    such release (a worker that never served alone) or its gate fails."""
    staged = (host.releases / rid).is_dir()  # a worker that failed to stage it never had it
    if staged and role(host.record(rid)) != "worker":
        raise Fail(f"release {rid} is not a pair worker's release ({PAIR_LEAVE_CMD} leaves only those)")
    with one_switch_at_a_time(host.layout):  # its own activate holds this lock too: one after the other
        own = _own_activate_job(host)
        if own:  # its own converge switches it (it is no pair worker there): not a second switch after that job
            return {"release": host.current(), "own_job": own}
        back = host.previous() if host.current() == rid else host.current()
        if not back or back == rid or role(host.record(back)) is not None:
            raise Fail(f"nothing to go back to: this worker served no release of its own before {rid}")
        host.activate_unlocked(back, False, None, (), False)
        if host.previous() == rid:
            host.previous_file.unlink(missing_ok=True)  # the failed pair release must not be "previous"
    return {"release": back}


def _own_activate_job(host) -> str | None:
    """The key of the activate job this host runs now, if any (a pair worker never runs one: only its head does)."""
    jid = host.jobs.active()
    key = ((read_json(host.jobs.dir / jid / "job.json") or {}).get("key") or "") if jid else ""
    return key if key.startswith("activate:") else None


def prune_quietly(host, keep: int) -> None:
    """Prune beyond `keep` releases after a passed switch; a failure is a warning, never a failed switch."""
    try:
        host.prune(keep)
    except (OSError, Fail) as exc:
        say(f"warning: pruning beyond {keep} releases failed ({exc}); the next switch tries again", err=True)


@contextlib.contextmanager
def one_switch_at_a_time(layout):
    """An exclusive lock on a host's switch: its own activate, and on a worker its head's asks (a head that gave up
    waiting and reverts asks again while the first ask may still run); the second waits (LOCK_SEC at most) for the
    first instead of racing it."""
    with open(layout.pair_switch_lock, "a") as fh:
        deadline = time.monotonic() + LOCK_SEC
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Fail(f"another switch of this host still runs after {LOCK_SEC}s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def wait_running(service: str, limit: float, every: float = 1.0) -> None:
    """Until the unit is active and its container runs; Fail after `limit` seconds or when the unit failed."""
    deadline = time.monotonic() + limit
    while True:
        state = sh("systemctl", "is-active", service, check=False).stdout.strip()
        running = sh("docker", "inspect", "--format", "{{.State.Running}}", service, check=False).stdout.strip()
        if state == "active" and running == "true":
            return
        if state == "failed" or time.monotonic() > deadline:
            raise Fail(f"{service} is not running (unit {state or 'unknown'}, container running: {running or 'no'})")
        time.sleep(every)
