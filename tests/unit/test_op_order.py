"""The operations of every deploy as pyinfra's command line runs them, pinned by name: each host's operations in its
order, which hosts share each operation, and the fleet's order.

pyinfra's command line (`pyinfra inventory.py deploys/X.py`) identifies an operation by where it is called: the line
numbers of its call stack's frames that are not pyinfra's own. Hosts whose deploy code reaches an operation through
the same lines share it, and pyinfra runs the fleet's operations in one order (each host's own kept, ties broken by
those line numbers), an operation on all its hosts before the next. So moving code between modules changes every
line number but must change nothing here; and no two different operations may come to share one identity, which
would make hosts wait on each other at the wrong step.

The deploy files are those of the scaffold of version 0.1.0, which users' projects contain, run on a fleet with
every role (tests/unit/fakefleet.py: two Sparks serving eagle3, a TP=2 pair, a Hub mirror, a gateway), fresh and
converged. The golden, tests/unit/golden/op_order.json, holds names only: no line numbers, no operation hashes, and
release ids written as r-<release> (tests/unit/test_golden_render.py pins them). When a change of order is intended,
regenerate it with `SPECFLEET_GOLDEN_WRITE=1 python3 -m pytest tests/unit/test_op_order.py` and read its diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import pytest

from tests.unit import fakefleet
from tests.unit.conftest import TOKEN

GOLDEN = Path(__file__).parent / "golden" / "op_order.json"
# What each state of the fleet runs: a fresh fleet is set up, a converged one also cleaned up and rolled back.
RUNS = {"fresh": ("hub_mirror", "gateway", "eagle3", "qwen3_eagle3_pair"),
        "converged": ("hub_mirror", "gateway", "eagle3", "qwen3_eagle3_pair", "cleanup", "rollback")}
RELEASE = re.compile(r"\br-[0-9a-f]{12}\b")
# Operations that several hosts share under different names, and why that is harmless; any other is a failure.
# - The pair trust step writes a head's files and a worker's in one loop: their i-th files are one operation, and
#   neither host waits on the other's.
# - Cleanup names what it removes from the pair host it runs on.
SHARED_NAMES = {
    frozenset({"Converge | Pair trust | Pin spark-04's SSH host key at its link addresses",
               "Converge | Pair trust | Install pair-agent (orted checks its path)"}),
    frozenset({"Converge | Pair trust | Install pair-agent (mpirun's rsh agent)",
               "Converge | Pair trust | Install pair-gate (the MPI key's forced command)"}),
    frozenset({"Cleanup | Remove the pair's MPI trust (6 file(s))",
               "Cleanup | Remove the pair's MPI trust (4 file(s), the login)"}),
}


def _name(name: str) -> str:
    return RELEASE.sub("r-<release>", name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(fleet state, deploy) -> (pyinfra State, trace) of every run."""
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", TOKEN)
        mp.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
        mp.delenv("SPECFLEET_INVENTORY", raising=False)
        root = fakefleet.project(tmp_path_factory.mktemp("op_order"))
        for state_name, deploys in RUNS.items():
            answers = fakefleet.answers(root, state_name)
            for deploy in deploys:
                out[state_name, deploy] = fakefleet.run_file(root, deploy, answers)
    return out


def operation_order(state, trace) -> dict:
    """Each host's operation names in its order, and the fleet's order: each operation's names and hosts."""
    hosts = [h.name.removeprefix("@fake/") for h in state.inventory]
    names: dict[str, set[str]] = {}
    for ops in trace.values():
        for op_hash, name, _ in ops:
            names.setdefault(op_hash, set()).add(_name(name))
    order = [{"names": sorted(names[op]), "hosts": [h for h in hosts if any(op == o for o, _, _ in trace.get(h, ()))]}
             for op in state.get_op_order()]
    return {"hosts": {h: [_name(name) for _, name, _ in trace.get(h, ())] for h in hosts}, "order": order}


def _lines(run: dict) -> list[str]:
    return ([f"{h}: {name}" for h, names in run["hosts"].items() for name in names] + ["-- the fleet's order:"] +
            [f"{' / '.join(op['names'])}  @ {', '.join(op['hosts'])}" for op in run["order"]])


def test_every_run_goes_through_on_every_host(runs):
    """The golden pins runs that succeed: a host failing would cut its sequence short."""
    for key, (state, _) in runs.items():
        assert not state.failed_hosts, (key, sorted(h.name for h in state.failed_hosts))


def test_each_host_adds_its_operations_in_the_order_pyinfra_runs_them(runs):
    for key, (state, trace) in runs.items():
        for h in state.inventory:
            assert [op for op, _, _ in trace.get(h.name.removeprefix("@fake/"), ())] == h.op_hash_order, key


def test_operation_order_is_unchanged(runs):
    got = {state_name: {deploy: operation_order(*runs[state_name, deploy]) for deploy in deploys}
           for state_name, deploys in RUNS.items()}
    if os.environ.get("SPECFLEET_GOLDEN_WRITE"):
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert sorted((s, d) for s in want for d in want[s]) == sorted(runs), "the set of runs changed"
    diffs = [f"{state_name} {deploy}:\n" + "\n".join(difflib.unified_diff(
                 _lines(want[state_name][deploy]), _lines(got[state_name][deploy]), "golden", "now", n=2, lineterm=""))
             for state_name, deploys in RUNS.items() for deploy in deploys
             if got[state_name][deploy] != want[state_name][deploy]]
    assert not diffs, "operations changed (names, a host's order, sharing, or the fleet's order):\n" + "\n".join(diffs)


def shared_identities(trace) -> tuple[list, list]:
    """Operation hashes that hosts reached from different code (the files and functions of their call stacks), and
    the sets of different names that hosts gave one hash."""
    code: dict[str, set] = {}
    names: dict[str, set[str]] = {}
    for ops in trace.values():
        for op_hash, name, path in ops:
            code.setdefault(op_hash, set()).add(path)
            names.setdefault(op_hash, set()).add(_name(name))
    return ([sorted(paths) for paths in code.values() if len(paths) > 1],
            [frozenset(n) for n in names.values() if len(n) > 1])


def _code(paths: list) -> list[str]:
    return [" > ".join(f"{Path(file).name}:{function}" for file, function in path) for path in paths]


def test_no_two_different_operations_share_one_identity(runs):
    seen = set()
    for key, (_, trace) in runs.items():
        by_code, by_name = shared_identities(trace)
        assert not by_code, (key, "one operation hash, reached from different code", [_code(p) for p in by_code])
        assert not set(by_name) - SHARED_NAMES, (key, "one operation hash, different names", set(by_name) - SHARED_NAMES)
        seen.update(by_name)
    assert seen == SHARED_NAMES, ("SHARED_NAMES lists sharing that no longer happens", SHARED_NAMES - seen)


def test_the_identity_check_can_fail():
    """Two hosts reaching one hash from different functions, or under different names, are found."""
    trace = {"a": [("h1", "Converge | Install x", (("deploy.py", "<module>"), ("steps/x.py", "install")))],
             "b": [("h1", "Converge | Remove y", (("deploy.py", "<module>"), ("steps/y.py", "remove")))]}
    by_code, by_name = shared_identities(trace)
    assert len(by_code) == 1 and by_name == [frozenset({"Converge | Install x", "Converge | Remove y"})]
