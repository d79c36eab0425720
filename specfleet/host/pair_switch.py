"""A two-Spark pair's switch, driven by the head's host job (stdlib; installed next to the host tool, which
imports it). The pair serves one release, the head's: its release.json's `pair` section names the worker and the
worker's own release, which the head's release id covers (plan.Rendered). So the one job on the head that
activates it also switches the worker, and a controller that dies midway changes nothing:

1. the head stops its launch (mpirun): the worker's rank, an orted in the worker's container, ends with it;
2. it asks the worker, over the pair's MPI key through the pair agent (the worker's host key pinned), for
   `specfleet-host activate ID --pair-worker` (Layout.pair_worker_words), the second and last command the worker's
   pair gate lets through. The worker installs its release, (re)starts its container (the rank holder) unless it
   already runs it, waits until it runs, and answers with one JSON line;
3. the head starts its launch, and the readiness gate runs on the head (/health, the smoke completion: both ranks).

A failed step or gate reverts the same way (the head's `previous` release names its own worker release): the
worker is switched back first, then the head. Start order: worker, then head; stop order: head, then worker."""

from __future__ import annotations

import json
import os
import subprocess
import time

from hostlib import Fail, sh
from layout import PAIR_AGENT_ENV

WORKER_ANSWER_SEC = 300  # how long the head waits for the worker's side (it bounds its own wait by HOLD_SEC)
HOLD_SEC = 120  # how long the worker waits for its container to run after a (re)start


def role(rec: dict) -> str | None:
    """`head` or `worker` for a pair's release, None for a single Spark's."""
    return (rec.get("pair") or {}).get("role")


def switch_worker(layout, rec: dict, say) -> bool:
    """Ask the worker to activate the worker release of the head's release `rec`; whether it (re)started its
    container. Fail, naming the worker, when it refuses, fails or does not answer."""
    worker = rec["pair"]["worker"]
    name, rid = worker["host"], worker["release"]
    argv = [layout.pair_agent, worker["address"], *layout.pair_worker_words(rid)]
    env = {**os.environ, **dict(zip(PAIR_AGENT_ENV, (worker["login"], str(worker["port"]))))}
    say(f"asking the worker {name} to activate {rid}")
    try:
        proc = subprocess.run(argv, env=env, text=True, capture_output=True, timeout=WORKER_ANSWER_SEC)
    except subprocess.TimeoutExpired:
        raise Fail(f"the worker {name} did not answer within {WORKER_ANSWER_SEC}s (switching to {rid})") from None
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        say(f"  {name}: {line}")
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if proc.returncode != 0 or not isinstance(answer, dict) or answer.get("release") != rid:
        why = ((proc.stderr or proc.stdout).strip().splitlines() or ["no answer"])[-1]
        raise Fail(f"the worker {name} did not switch to {rid}: {why}")
    say(f"the worker {name} runs {rid}" + (" (its container started again)" if answer.get("restarted") else ""))
    return bool(answer.get("restarted"))


def hold(host, rid: str) -> dict:
    """The worker's side: install release `rid` and (re)start its container unless it already runs it, then wait
    until the container runs. Recorded in its gate.json (role worker); the answer the head reads."""
    rec = host.record(rid)
    if role(rec) != "worker":
        raise Fail(f"release {rid} is not a pair worker's release (--pair-worker activates only those)")
    host.check_complete(rec)
    restart = host.restart_needed(rec)
    host.set_gate(rid, "running", role="worker")
    try:
        host.install(rec)
        if restart:
            sh("systemctl", "reset-failed", f"{rec['service']}.service", check=False)
            sh("systemctl", "restart", f"{rec['service']}.service")
        wait_running(rec["service"], HOLD_SEC)
    except Fail as exc:
        host.set_gate(rid, "failed", role="worker", detail=str(exc))
        raise
    host.set_gate(rid, "passed", role="worker")
    return {"release": rid, "restarted": restart}


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
