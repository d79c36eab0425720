"""A rollout whose canary fails its gate halts there: the canary is reported rolled back (serving its old release),
the other hosts are not switched, and the exit code is 1. The hosts are recorded, not contacted (runner.run_on
and the status read are replaced); the same scenario runs on VM guests in the --full tier
(tests/vm/test_rollout.py::test_bad_release_is_rolled_back_on_the_canary_and_halts)."""

from __future__ import annotations

from specfleet import rollout, runner
from tests.unit.fakehost import make_plans

OLD = "r-000000000000"


def _run(monkeypatch, switch_fails: set[str], tolerated: int = 0):
    plans = make_plans({h: {} for h in ("spark-01", "spark-02", "spark-03")}, "eagle3")
    switched: list[list[str]] = []

    def run_on(plans, hosts, fn, *args):
        if fn.__name__ == "switch":
            switched.append(list(hosts))
            return set(hosts) & switch_fails
        return set()

    def read_statuses(plans, hosts):
        done = {h for batch in switched for h in batch} - switch_fails  # a failed gate reverted: old release serves
        return {h: {"current": plans[h].release_id if h in done else OLD, "active": "active"} for h in hosts}

    monkeypatch.setattr(runner, "run_on", run_on)
    monkeypatch.setattr(runner, "read_statuses", read_statuses)
    monkeypatch.setattr(runner, "lock_hosts", lambda plans, hosts, rid, *k: (list(hosts), set(), {}))
    r = rollout.Rollout("eagle3", plans, [], list(plans), "1,1", tolerated, log=lambda line: None)
    rollout.run(r)
    lines, code = rollout.summary(r)
    return switched, r, "\n".join(lines), code


def test_a_canary_that_fails_its_gate_halts_the_rollout(monkeypatch):
    switched, r, text, code = _run(monkeypatch, {"spark-01"})
    assert switched == [["spark-01"]]  # nobody after the canary was switched
    assert code == rollout.EXIT_HALTED and "result: HALTED" in text
    assert r.outcomes["spark-01"].result == "failed its gate; rolled back (serving the old release)"
    assert [r.outcomes[h].result for h in ("spark-02", "spark-03")] == ["not touched", "not touched"]


def test_within_the_tolerance_the_rollout_goes_on_and_ends_partial(monkeypatch):
    switched, r, text, code = _run(monkeypatch, {"spark-01"}, tolerated=1)
    assert switched == [["spark-01"], ["spark-02"], ["spark-03"]]
    assert code == rollout.EXIT_PARTIAL and "result: PARTIAL" in text
    assert [r.outcomes[h].result for h in ("spark-02", "spark-03")] == ["switched", "switched"]
