"""Controller cost of a converge on pyinfra's @fake connector: CPU per host and peak memory, as N grows.

Prints figures and asserts no time. Each (deploy, N) runs in a fresh Python process, so its peak RSS is its own:

    python3 -m benchmarks.controller 10 100 [1000]

Rows:
- `pyinfra`: pyinfra's own cost for a one-fact, one-operation deploy (files.directory) on the same connector;
- `noop`: specfleet's converge of an already converged host (one status read, nothing to change);
- `fresh`: specfleet's converge of a fresh host (everything to do).
The ratio column is CPU per host against the `pyinfra` row of the same N, measured in the same run.
Plans are built before the clock starts (their cost is in `plans ms/host`).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

KINDS = ("pyinfra", "noop", "fresh")


def _plans(n: int):
    from tests.unit.fakehost import make_plans

    return make_plans({f"spark-{i:04d}": {"operator_users": ["nvidia"]} for i in range(n)}, "eagle3")


def _pyinfra_only(n: int) -> tuple[float, float]:
    from pyinfra.api import Config, Inventory, State
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.deploy import add_deploy
    from pyinfra.api.operations import run_ops
    from pyinfra.operations import files

    def deploy():
        files.directory(name="One directory", path="/var/lib/bench")

    hosts = [(f"@fake/h{i:04d}", {"fake_delay": 0, "fake_delay_jitter": 0}) for i in range(n)]
    start = time.process_time()
    state = State(Inventory((hosts, {})), Config())
    connect_all(state)
    add_deploy(state, deploy)
    run_ops(state)
    disconnect_all(state)
    return 0.0, time.process_time() - start


def _specfleet(n: int, kind: str) -> tuple[float, float]:
    from specfleet.steps import converge
    from tests.unit.fakehost import converged_responses, run_deploy
    from tests.unit.test_deploy_fake import FRESH

    start = time.process_time()
    plans = _plans(n)
    built = time.process_time()
    # The @fake answers are scripted before the clock starts (the harness is not specfleet), and what scripting
    # them derived is forgotten, as in a real run where inventory.py derives nothing.
    answers = {h: converged_responses(plan) if kind == "noop" else FRESH for h, plan in plans.items()}
    for plan in plans.values():
        plan._memo.clear()
    begin = time.process_time()
    state = run_deploy(plans, converge, "eagle3", responses=lambda plan: answers[plan.settings.host])
    assert not state.failed_hosts, state.failed_hosts  # a benchmark of a failing run would measure nothing
    return built - start, time.process_time() - begin


def one(kind: str, n: int) -> dict:
    """Measure one (kind, N) in this process; returns CPU seconds and the peak RSS."""
    import os

    os.environ.setdefault("HF_TOKEN", "hf_benchmark_token_not_real")
    plans_cpu, run_cpu = _pyinfra_only(n) if kind == "pyinfra" else _specfleet(n, kind)
    return {"kind": kind, "n": n, "plans_cpu": plans_cpu, "run_cpu": run_cpu, "peak_rss_mb": _peak_rss_mb()}


def _peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: unlike getrusage's maxrss, it does not carry the parent's over exec)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(ns: list[int]) -> list[dict]:
    rows = []
    for n in ns:
        for kind in KINDS:
            out = subprocess.run([sys.executable, "-m", "benchmarks.controller", "--one", kind, str(n)],
                                 check=True, capture_output=True, text=True)
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows


def report(rows: list[dict]) -> list[str]:
    base = {r["n"]: r["run_cpu"] / r["n"] for r in rows if r["kind"] == "pyinfra"}
    lines = [f"{'deploy':<8} {'N':>5} {'plans ms/host':>14} {'run ms/host':>12} {'x pyinfra':>10} {'peak MB':>8}"]
    for r in rows:
        per_host = r["run_cpu"] / r["n"]
        lines.append(f"{r['kind']:<8} {r['n']:>5} {1000 * r['plans_cpu'] / r['n']:>14.2f} {1000 * per_host:>12.2f} "
                     f"{per_host / base[r['n']]:>10.2f} {r['peak_rss_mb']:>8.0f}")
    return lines


def main(argv: list[str]) -> None:
    if argv[:1] == ["--one"]:
        print(json.dumps(one(argv[1], int(argv[2]))))
        return
    print("\n".join(report(measure([int(a) for a in argv] or [10, 100]))))


if __name__ == "__main__":
    main(sys.argv[1:])
