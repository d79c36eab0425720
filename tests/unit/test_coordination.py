"""The helper for what the hosts of one pyinfra run share, and for waits between them (specfleet/fleet/steps/coordination.py).

A slot's value is per run (per pyinfra State): made on first use, the same object for every host of the run, never
seen by another run, and gone with its State. A wait is checked by its mechanism: a clock that moves only when the
waiting host sleeps, and peers whose state the test changes between two polls; then through pyinfra itself, with a
toy feature that declares its own slots in this file (nothing in the helper knows it)."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import gevent
import pytest
from pyinfra import host
from pyinfra.api import Config, Inventory, State
from pyinfra.context import ctx_state
from pyinfra.operations import python, server

from specfleet.fleet.steps import coordination
from specfleet.fleet.steps.coordination import PEER_GRACE_SEC, POLL_SEC, SharedOperation, Slot, shared, wait_for_peer
from tests.unit.fakehost import make_plans, run_deploy

ROOT = Path(__file__).resolve().parents[2]

_LIST: Slot[list[str]] = Slot("test: a list", list)
_COUNTS: Slot[dict[str, int]] = Slot("test: counts", dict)


def _state() -> State:
    return State(Inventory((["@fake/a", "@fake/b"], {})), Config())


# ---- slots: one value per run ----------------------------------------------------------------------------------
def test_a_slot_is_one_value_per_run_made_on_first_use():
    made = []
    slot: Slot[list[str]] = Slot("test: made once", lambda: made.append(1) or [])
    state = _state()
    assert made == [] and shared(state).names() == []
    slot(state).append("a")
    slot(state).append("b")
    assert slot(state) == ["a", "b"] and slot(state) is slot(state) and made == [1]
    with ctx_state.use(state):  # while pyinfra prepares or runs the run: the same value without naming the State
        assert slot() is slot(state)
    assert shared(state).names() == ["test: made once"]


def test_two_runs_do_not_see_each_others_values():
    one, two = _state(), _state()
    _LIST(one).append("from run one")
    _COUNTS(one)["a"] = 1
    assert _LIST(two) == [] and _COUNTS(two) == {}
    _LIST(two).append("from run two")
    assert _LIST(one) == ["from run one"] and _LIST(two) == ["from run two"]
    assert shared(one) is not shared(two)


def test_two_slots_of_one_run_are_apart():
    state = _state()
    _LIST(state).append("x")
    assert _COUNTS(state) == {}
    assert shared(state).names() == ["test: a list", "test: counts"]


def test_a_finished_runs_values_go_with_its_state():
    state = _state()
    _LIST(state).append("x")
    values = weakref.ref(shared(state))
    del state
    gc.collect()
    assert values() is None


# ---- waits, by mechanism ---------------------------------------------------------------------------------------
class _Host:
    """What a wait reads of a pyinfra Host: its name, the operation it runs now, the operations it added."""

    def __init__(self, name: str, op: str | None = None, added: tuple[str, ...] = ()) -> None:
        self.name, self.executing_op_hash, self.op_hash_order = name, op, list(added)


class _Run:
    """What a wait reads of a pyinfra State: its hosts (in inventory order) and those that failed."""

    def __init__(self, *hosts: _Host) -> None:
        self.inventory, self.failed_hosts = list(hosts), set()


class _Clock:
    """Time that moves only when the waiting host sleeps; `each_poll(n)` is what happens meanwhile elsewhere."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []
        self.each_poll = lambda n: None

    def sleep(self, seconds: float) -> None:
        if len(self.sleeps) >= 10_000:
            raise AssertionError("the wait does not end")
        self.sleeps.append(seconds)
        self.now += seconds
        self.each_poll(len(self.sleeps))


@pytest.fixture
def clock(monkeypatch):
    c = _Clock()
    monkeypatch.setattr(coordination, "_now", lambda: c.now)
    monkeypatch.setattr(coordination, "_sleep", c.sleep)
    return c


def test_a_wait_polls_until_done_and_sleeps_not_at_all_when_done_already(clock):
    me, peer = _Host("me", "op"), _Host("peer", "op")
    done = []
    clock.each_poll = lambda n: n == 3 and done.append(True)
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: bool(done), deadline_sec=60) == "done"
    assert clock.sleeps == [POLL_SEC] * 3
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: True) == "done" and len(clock.sleeps) == 3


def test_a_failed_or_missing_peer_ends_the_wait(clock):
    me, peer = _Host("me", "op"), _Host("peer", "op")
    run = _Run(me, peer)
    clock.each_poll = lambda n: n == 2 and run.failed_hosts.add(peer)
    assert wait_for_peer(run, me, peer, lambda: False) == "failed" and len(clock.sleeps) == 2
    assert wait_for_peer(run, me, None, lambda: False) == "failed" and len(clock.sleeps) == 2


def test_a_peer_in_another_operation_is_given_the_grace_period_then_called_elsewhere(clock):
    me, peer = _Host("me", "op-7"), _Host("peer", "op-6")
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: False, deadline_sec=600) == "elsewhere"
    assert PEER_GRACE_SEC < clock.now <= PEER_GRACE_SEC + 2 * POLL_SEC
    peer.executing_op_hash = None  # a peer that runs no operation (pyinfra --serial: its turn comes later)
    clock.now, clock.sleeps = 0.0, []
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: False, grace_sec=1.0) == "elsewhere"
    assert 1.0 < clock.now <= 1.0 + 2 * POLL_SEC


def test_a_peer_that_reaches_the_operation_within_the_grace_period_is_waited_for(clock):
    me, peer = _Host("me", "op-7"), _Host("peer", "op-6")
    done = []

    def meanwhile(n):
        if n == 5:
            peer.executing_op_hash = "op-7"
        if clock.now > 3 * PEER_GRACE_SEC:
            done.append(True)
    clock.each_poll = meanwhile
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: bool(done)) == "done"


def test_a_peer_in_the_same_operation_is_waited_for_until_the_deadline(clock):
    me, peer = _Host("me", "op"), _Host("peer", "op")
    assert wait_for_peer(_Run(me, peer), me, peer, lambda: False, deadline_sec=30) == "timeout"
    assert 30 < clock.now <= 30 + 2 * POLL_SEC


def test_without_a_grace_period_or_deadline_only_done_or_failed_end_the_wait(clock):
    me, peer = _Host("me", "op"), _Host("peer", None)
    run = _Run(me, peer)
    clock.each_poll = lambda n: n == 1000 and run.failed_hosts.add(peer)
    assert wait_for_peer(run, me, peer, lambda: False, deadline_sec=None, grace_sec=None) == "failed"
    assert len(clock.sleeps) == 1000


def test_a_waiting_host_lets_the_other_hosts_run(monkeypatch):
    """Hosts are greenlets of one thread: the wait sleeps with gevent, so the peer it waits for gets to finish."""
    monkeypatch.setattr(coordination, "POLL_SEC", 0)
    me, peer = _Host("me", "op"), _Host("peer", "op")
    done = []
    waiter = gevent.spawn(wait_for_peer, _Run(me, peer), me, peer, lambda: bool(done), 5)
    publisher = gevent.spawn(done.append, True)
    gevent.joinall([waiter, publisher], timeout=10)
    assert waiter.value == "done"


def test_a_shared_operation_records_who_added_it_and_waits_for_what_they_publish(clock):
    a, b, c = _Host("a", None, ("op-1", "op-2")), _Host("b", None, ("op-2",)), _Host("c")
    run = _Run(c, b, a)
    op: SharedOperation[str] = SharedOperation()
    op.added(a)
    op.added(b)
    assert op.ops == {"a": "op-2", "b": "op-2"} and op.hosts(run) == [b, a]  # inventory order
    c.executing_op_hash, a.executing_op_hash = "op-2", "op-2"
    assert op.running_with(run, c) == [b, a]
    c.executing_op_hash = "op-1"
    assert op.running_with(run, c) == []
    clock.each_poll = lambda n: n == 4 and op.publish(a, "a's result")
    assert op.wait(run, b, a, deadline_sec=60) == "done" and op.results == {"a": "a's result"}
    assert len(clock.sleeps) == 4


# ---- through pyinfra: a toy feature with its own slots ---------------------------------------------------------
_HANDSHAKE: Slot[SharedOperation[str]] = Slot("test: handshake", SharedOperation)
_WAITING: Slot[set[str]] = Slot("test: hosts waiting", set)
_OUTCOME: Slot[dict[str, tuple[str, str | None]]] = Slot("test: outcome", dict)


def _handshake(state, host) -> bool:
    """spark-1 publishes once spark-2 waits for it; spark-2 waits for spark-1's result."""
    op = _HANDSHAKE(state)
    if host.name == "@fake/spark-1":
        for _ in range(10_000):  # turns until spark-2 waits (a bound: a broken helper fails the test, not hangs it)
            if "@fake/spark-2" in _WAITING(state):
                break
            gevent.sleep(0)
        op.publish(host, "from spark-1")
        return True
    first = next(h for h in op.hosts(state) if h is not host)
    _WAITING(state).add(host.name)
    why = op.wait(state, host, first, deadline_sec=600)
    _OUTCOME(state)[host.name] = (why, op.results.get(first.name))
    return True


@pytest.fixture
def turns(monkeypatch):
    """A wait's clock moves by the poll at each sleep, and each sleep lets the other greenlets take a turn: the grace
    period is a number of turns the peer gets, not a race against the wall clock."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        gevent.sleep(0)
    monkeypatch.setattr(coordination, "_now", lambda: now[0])
    monkeypatch.setattr(coordination, "_sleep", sleep)


def toy_deploy() -> None:
    if host.name == "@fake/spark-1":  # an operation only spark-1 has, before the shared one
        server.shell(name="spark-1 only", commands=["true"])
    python.call(name="Handshake", function=_handshake)  # one call site for both hosts
    _HANDSHAKE().added(host)


def test_hosts_that_add_an_operation_from_one_place_share_it_and_one_waits_for_the_other(turns):
    """As `pyinfra inventory.py deploys/...` runs it, spark-2 waits inside the shared operation for spark-1's result;
    a second run starts from nothing."""
    plans = make_plans({"spark-1": {}, "spark-2": {}}, None)
    state = run_deploy(plans, toy_deploy, cli=True)
    assert not state.failed_hosts
    assert _OUTCOME(state) == {"@fake/spark-2": ("done", "from spark-1")}
    assert len(set(_HANDSHAKE(state).ops.values())) == 1  # one operation, although spark-1 has one more before it
    again = run_deploy(plans, toy_deploy, cli=True)
    assert _HANDSHAKE(again) is not _HANDSHAKE(state) and _OUTCOME(again) is not _OUTCOME(state)
    assert _OUTCOME(again) == {"@fake/spark-2": ("done", "from spark-1")} and len(_OUTCOME(state)) == 1


def test_under_the_python_api_a_host_whose_peer_runs_another_operation_says_so(turns):
    """pyinfra's Python API numbers each host's operations: spark-1's extra operation puts its handshake one later
    than spark-2's, and spark-2's wait ends with "elsewhere" once spark-1 has left the operation they had in common."""
    state = run_deploy(make_plans({"spark-1": {}, "spark-2": {}}, None), toy_deploy)
    assert _OUTCOME(state) == {"@fake/spark-2": ("elsewhere", None)}
    assert _HANDSHAKE(state).results == {"@fake/spark-1": "from spark-1"}  # in its own, later operation


# ---- the one place -----------------------------------------------------------------------------------------------
def test_only_the_helper_reads_pyinfras_operation_bookkeeping_or_keeps_values_per_run():
    """Values shared by a run's hosts are slots, and waits between hosts go through the helper: nothing else in the
    package keeps a registry keyed by pyinfra's State or reads which operation a host runs."""
    helper = ROOT / "specfleet" / "fleet" / "steps" / "coordination.py"
    pattern = re.compile(r"executing_op_hash|op_hash_order|WeakKeyDictionary")
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "specfleet").rglob("*.py")) if path != helper
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert not found, "use specfleet/fleet/steps/coordination.py (a Slot, SharedOperation, wait_for_peer):\n" + "\n".join(found)
    assert pattern.search(helper.read_text(encoding="utf-8"))  # the check reads the right files
