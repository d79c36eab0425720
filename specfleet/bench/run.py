"""`specfleet bench` on the hosts: lock the bench hosts, then round by round stage and switch each host's variant
behind the readiness gate (the rollout's steps), run the load on the host (specfleet/bench/host/bench_load.py), and
record the results; every host returns to the release it served before, also when interrupted or when a variant
fails its gate. The variants, statistics and outputs: bench/rules.py; the command: cli/bench.py.

Through runner.run_on (looked up when called, so tests stand it in); `_load_deploy` and `_restore_deploy` return
the two host-side deploys (also stood in by the tests)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, python

from ..fleet import run as runner
from ..fleet.programs import program
from ..fleet.steps.jobs import host_job, run_on_host
from ..fleet.steps.lock import unlock
from ..fleet.steps.state import current_plan, host_status
from ..plan import HostPlan
from ..serving.render import profile_of
from ..steps import stage, switch
from .rules import LOAD_TOOL, Variant, load_counters, serve_url, variant_result


@deploy("Bench: return to the release served before")
def restore(targets: dict[str, str]):
    plan = current_plan()
    layout = plan.paths
    target = targets.get(host.name)
    st = host_status(plan).release
    if not target or (target == st.current and st.active == "active" and st.gate_passed(target)):
        return
    host_job(name=f"Switch back to release {target} and gate it", key=f"activate:{target}",
             argv=layout.host_tool_argv("activate", target, "--revert"))


@deploy("Bench: load")
def load(specs: dict[str, dict], out: dict):
    plan = current_plan()
    tool = f"{plan.paths.bin}/{LOAD_TOOL}"
    files.put(name=f"Install {LOAD_TOOL}", src=str(program("bench_load.py")),
              dest=tool, user="root", group="root", mode="755")

    def run(state, host):
        ok, stdout, stderr = run_on_host(state, host, f"python3 {tool}", stdin=json.dumps(specs[host.name]))
        try:
            out[host.name] = json.loads(stdout[-1])
        except (IndexError, ValueError):
            out[host.name] = {"error": (stderr or stdout or ["no output"])[-1]}
        return True

    python.call(name="Run the bench load on the host (against its loopback server)", function=run)


def _restore_deploy():
    return restore


def _load_deploy():
    return load


@dataclass
class Bench:
    """One bench: the rounds of (host, variant) with each round's plans, the hosts' own plans, what the load client
    is told (the same for every host: prompts per bucket, requests, concurrency, ...), and as it goes, the results."""

    hosts: list[str]
    rounds: list[list[tuple[str, Variant]]]
    round_plans: list[dict[str, HostPlan]]
    base_plans: dict[str, HostPlan]
    load: dict  # buckets (name -> prompts), requests, concurrency, warmup, max_tokens, temperature
    health_timeout: int | None = None
    log: Callable[[str], None] = print
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    results: list[dict] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # host -> the owner of the lock it holds for another run
    interrupted: bool = False


def run(b: Bench) -> None:
    """Lock, run every round, restore every touched host, unlock. Refused (b.refused, nothing done) when another run
    holds a lock on a bench host; interrupted (b.interrupted) by Ctrl-C, after the hosts were restored."""
    b.log(f"{b.id}: {sum(len(r) for r in b.rounds)} variant(s) on {len(b.hosts)} host(s) in {len(b.rounds)} round(s)")
    usable, lock_failed, b.refused = runner.lock_hosts(b.base_plans, b.hosts, b.id, "bench")
    if b.refused:
        return
    before = {h: info.get("current") for h, info in runner.read_statuses(b.base_plans, usable).items()}
    for h in lock_failed:
        b.log(f"{h}: unreachable; its variants are skipped")
    touched: set[str] = set()
    try:
        for index, (rnd, plans) in enumerate(zip(b.rounds, b.round_plans, strict=True), 1):
            for h, v in rnd:
                if h not in usable:
                    b.results.append(variant_result(v, h, plans.get(h), error="host unreachable"))
            pairs = [(h, v) for h, v in rnd if h in usable]
            if pairs:
                touched.update(h for h, _ in pairs)
                _round(b, index, pairs, plans)
    except KeyboardInterrupt:
        b.interrupted = True
        b.log("interrupted: returning every host to the release it served before")
    finally:
        targets = {h: before.get(h) for h in touched}
        not_restored = runner.run_on({h: b.base_plans[h] for h in touched}, [h for h in touched if targets[h]],
                                     _restore_deploy(), targets)
        runner.run_on(b.base_plans, usable, unlock, b.id, "bench")
        _report_restore(b, targets, not_restored)


def _round(b: Bench, index: int, pairs: list[tuple[str, Variant]], plans: dict[str, HostPlan]) -> None:
    """Stage and switch each host's variant, load the hosts that serve it, record a result per (host, variant)."""
    hs = [h for h, _ in pairs]
    b.log(f"round {index}/{len(b.rounds)}: " + ", ".join(f"{h} <- {v.name}" for h, v in pairs))
    failed = runner.run_on(plans, hs, stage)
    ok = [h for h in hs if h not in failed]
    failed |= runner.run_on(plans, ok, switch, b.health_timeout)
    after = runner.read_statuses(plans, hs)
    live = [h for h in hs if h not in failed and (after.get(h) or {}).get("current") == plans[h].release_id]
    specs = {h: {"url": serve_url(plans[h]), "model": profile_of(plans[h].settings)["target"]["repo"], **b.load,
                 "metrics": True, "counters": load_counters(plans[h].settings.engine)} for h in live}
    raw: dict[str, dict] = {}
    if live:
        b.log(f"round {index}: load on {', '.join(live)} ({len(b.load['buckets'])} bucket(s) x {b.load['requests']} "
              f"request(s), concurrency {b.load['concurrency']})")
        runner.run_on(plans, live, _load_deploy(), specs, raw)
    for h, v in pairs:
        if h not in live:
            why = ("failed to stage" if h not in ok else
                   "failed its gate (rolled back)" if (after.get(h) or {}).get("current") != plans[h].release_id
                   else "failed to switch")
            b.results.append(variant_result(v, h, plans[h], error=why))
        elif "error" in raw.get(h, {"error": "no result"}):
            why = f"load failed: {raw.get(h, {}).get('error', 'no result')}"
            b.results.append(variant_result(v, h, plans[h], error=why))
        else:
            b.results.append(variant_result(v, h, plans[h], raw=raw[h]))
        b.log(f"  {h} {v.name}: {b.results[-1].get('error') or 'measured'}")


def _report_restore(b: Bench, targets: dict[str, str | None], not_restored: set[str]) -> None:
    """Say, per touched host, whether it is back on the release it served before (and how to put it back if not)."""
    final = runner.read_statuses(b.base_plans, list(targets)) if targets else {}
    for h in targets:
        if not targets[h]:
            b.log(f"{h}: served no release before the bench; it now serves {final.get(h, {}).get('current')}")
        elif h in not_restored or final.get(h, {}).get("current") != targets[h]:
            b.log(f"{h}: NOT back on {targets[h]} (serves {final.get(h, {}).get('current')}): "
                  f"run pyinfra inventory.py deploys/rollback.py --limit {h} --data rollback_to={targets[h]}")
        else:
            b.log(f"{h}: back on {targets[h]}")
