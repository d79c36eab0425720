"""A rollout whose canary fails its gate halts there: the canary is reported rolled back (serving its old release),
the other hosts are not switched, and the exit code is 1. The hosts are recorded, not contacted (runner.run_on
and the status read are replaced); the same scenario runs on VM guests in the --full tier
(tests/vm/test_rollout.py::test_bad_release_is_rolled_back_on_the_canary_and_halts)."""

from __future__ import annotations

from specfleet.fleet import run as runner
from specfleet.serving.run import rollout
from tests.unit.fakehost import make_plans

OLD = "r-000000000000"


def _run(monkeypatch, switch_fails: set[str], tolerated: int = 0):
    plans = make_plans({h: {} for h in ("spark-01", "spark-02", "spark-03")}, "eagle3")
    switched, r, lines, code = _rollout(monkeypatch, plans, "eagle3", switch_fails, tolerated=tolerated)
    return switched, r, "\n".join(lines), code


def _rollout(monkeypatch, plans, profile: str, switch_fails: set[str], stage_fails=frozenset(), tolerated: int = 0):
    """Roll `profile` out on `plans` with --batches 1,1; the hosts in `switch_fails` fail their switch (reverted:
    the old release serves), those in `stage_fails` their stage."""
    switched: list[list[str]] = []

    def run_on(plans, hosts, fn, *args):
        if fn.__name__ == "switch":
            switched.append(list(hosts))
            return set(hosts) & switch_fails
        return set(hosts) & stage_fails if fn.__name__ == "stage" else set()

    def read_statuses(plans, hosts):
        done = {h for batch in switched for h in batch} - switch_fails  # a failed gate reverted: old release serves
        return {h: {"current": plans[h].release_id if h in done else OLD, "active": "active"} for h in hosts}

    monkeypatch.setattr(runner, "run_on", run_on)
    monkeypatch.setattr(runner, "read_statuses", read_statuses)
    monkeypatch.setattr(runner, "lock_hosts", lambda plans, hosts, rid, *k: (list(hosts), set(), {}))
    r = rollout.Rollout(profile, plans, [], list(plans), "1,1", tolerated, log=lambda line: None)
    rollout.run(r)
    lines, code = rollout.summary(r)
    return switched, r, lines, code


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


def test_a_rollout_while_another_run_holds_a_hosts_lock_is_refused_and_releases_its_own(monkeypatch):
    """The run lock on @fake hosts (the real lock and unlock steps): spark-02 is held by another controller's rollout,
    so the rollout is refused before any stage, and the locks it took on the others are released again. The lock
    refusal on VM guests: tests/vm/test_faults.py::test_two_converges_at_once (--full)."""
    from tests.unit.fakehost import converged_responses, executed, run_deploy

    plans = make_plans({h: {} for h in ("spark-01", "spark-02", "spark-03")}, "eagle3")
    other = "rollout r-other 2026-11-24T10:00:00Z op@other-controller pid 4242 since 2026-11-24T10:00:01Z"
    done: list[tuple[str, list[str], list[str]]] = []

    def run_on(plans, hosts, fn, *args):
        state = run_deploy({h: plans[h] for h in hosts}, fn, *args, responses=lambda p: converged_responses(
            p, **({"lock": other} if p.settings.host == "spark-02" else {})))
        done.append((fn.__name__, list(hosts), [c for h in hosts for c in executed(state)[h]]))
        held = args[1] if fn.__name__ == "lock" else {}
        for key in [k for k in held if k.startswith("@fake/")]:
            held[key.removeprefix("@fake/")] = held.pop(key)
        return {h.name.removeprefix("@fake/") for h in state.failed_hosts}

    monkeypatch.setattr(runner, "run_on", run_on)
    r = rollout.Rollout("eagle3", plans, [], list(plans), "1,1", 0, log=lambda line: None)
    rollout.run(r)
    assert r.refused == {"spark-02": other}
    assert [(name, hosts) for name, hosts, _ in done] == [("lock", ["spark-01", "spark-02", "spark-03"]),
                                                          ("unlock", ["spark-01", "spark-02", "spark-03"])], done
    # the release removes a lock only where this run's owner line is in it (spark-02's stays the other run's)
    unlocks = [c for c in done[1][2] if "rm -rf /var/lib/specfleet/lock" in c]
    assert len(unlocks) == 3 and all(f"rollout {r.id} " in c and c.startswith("if grep") for c in unlocks), unlocks
    assert not any("activate" in c or " stage r-" in c for _, _, cmds in done for c in cmds)


def _pairs_run(monkeypatch, switch_fails: set[str], stage_fails=frozenset(), tolerated: int = 0):
    """Two pairs (pair_a: spark-1 head, spark-2 worker; pair_b: spark-3, spark-4), rolled out 1,1."""
    host = {"image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"}
    plans = make_plans({"spark-1": {**host, "pair_role": "head"}, "spark-2": {**host, "pair_role": "worker"},
                        "spark-3": {**host, "pair_role": "head"}, "spark-4": {**host, "pair_role": "worker"}},
                       "qwen3_eagle3_pair", groups={"pair_a": ["spark-1", "spark-2"], "pair_b": ["spark-3", "spark-4"]})
    return _rollout(monkeypatch, plans, "qwen3_eagle3_pair", switch_fails, stage_fails, tolerated)


def test_a_pair_is_one_member_of_its_batch_and_one_row(monkeypatch):
    switched, r, lines, code = _pairs_run(monkeypatch, set())
    assert switched == [["spark-1", "spark-2"], ["spark-3", "spark-4"]]  # --batches 1,1: one pair per batch
    assert code == rollout.EXIT_OK
    rows = [line.split()[0] for line in lines[2:-1]]
    assert rows == ["spark-1+spark-2", "spark-3+spark-4"], lines


def test_a_pair_whose_head_fails_its_gate_halts_as_one_failure(monkeypatch):
    switched, r, lines, code = _pairs_run(monkeypatch, {"spark-1"})
    assert switched == [["spark-1", "spark-2"]] and code == rollout.EXIT_HALTED
    assert r.failures == {"spark-1"}  # one member failed, not two hosts
    assert r.outcomes["spark-1"].result == "failed its gate; rolled back (serving the old release)"
    assert r.outcomes["spark-2"].result.startswith("with its pair's spark-1: failed its gate")
    assert r.outcomes["spark-3"].result == "not touched"


def test_a_worker_that_fails_to_stage_keeps_its_pair_from_switching(monkeypatch):
    switched, r, lines, code = _pairs_run(monkeypatch, set(), stage_fails={"spark-2"}, tolerated=1)
    assert switched == [["spark-3", "spark-4"]] and code == rollout.EXIT_PARTIAL
    assert r.failures == {"spark-1"}
    assert r.outcomes["spark-2"].result == "failed to stage (still serving its old release)"
    assert r.outcomes["spark-1"].result.startswith("with its pair's spark-2: failed to stage")
