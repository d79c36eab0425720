"""What the hosts of one pyinfra run share, and every wait of one host for another.

**What is shared.** Each host's steps run in that host's context, but some of what they decide is about the other
hosts of the same run: the status reads (a pair host reads its peer's; the Hub mirror's warm-up reads what each
other host still lacks), the converge's count of the serving hosts it restarts at once, the mirror's warm-up result
and the hosts that fall back to the upstream Hub, a pair's new public keys, and each side of a pair's link. Such a
value lives in a `Slot`, which the feature that owns it declares in its own module, at import time:

    _FALLBACK: Slot[dict[str, str]] = Slot("hub fallbacks", dict)  # host name -> the upstream Hub

and reads as `_FALLBACK()` while pyinfra prepares a deploy, or `_FALLBACK(state)` inside an operation's function
(pyinfra calls it with the run's state). The first use in a run makes the value with the slot's factory; every
later use in that run, from any host, gets the same object. This module knows no feature: a new one declares a slot
of its own and changes nothing here. A value holds names and plain data, never a Host or the State (either refers
to the run and would keep it alive). The hosts of a run are greenlets of one thread, so a value changes only
between two yields, and needs no lock.

**Why per State.** One pyinfra `State` is one run, and a process runs several: `specfleet rollout` runs its phases
and batches as runs of their own, the bench its rounds, the unit tests thousands. A module-level value would carry
one run's status reads and results into the next. Here each State has its own `Shared` (made on first use, held
weakly: a finished run's values go with its State).

**How a wait works.** pyinfra runs one operation on all its hosts, one greenlet each, before the next. In a CLI run
(`pyinfra inventory.py deploys/...`) it identifies an operation by the line numbers of the call stack that added it
(`pyinfra.api.util.get_operation_order_from_stack`), so hosts whose steps call `python.call` from the same place
share ONE operation and run its function at the same time; the mirror's warm-up, a pair's key exchange and its
link are such operations. A `SharedOperation`, kept in a slot, records the operation each host added (`added`,
right after its `python.call`: the hash pyinfra gave it) and what each host publishes from inside it (`publish`).
Inside the operation a host waits for another (`wait_for_peer`; `SharedOperation.wait` for a published result) by
polling with `gevent.sleep`, which lets the other greenlets run (a blocking sleep would stop the very host it waits
for). Each poll asks in turn: done? did the peer fail (`state.failed_hosts`)? does the peer, past a grace period,
run another operation than this host, or none (pyinfra sets `host.executing_op_hash` while a host runs one)? is the
deadline past? The third question is how a wait notices that the hosts do not share the operation after all:
pyinfra's Python API (`specfleet rollout`, the bench) numbers each host's operations instead of reading call sites,
and `--serial` runs one host after the other; the wait then says so instead of waiting forever. `running_with`
answers, before any wait, which hosts added the operation as the very one a host runs now.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from weakref import WeakKeyDictionary

import gevent
from pyinfra.api import Host, State
from pyinfra.context import ctx_state

T = TypeVar("T")
R = TypeVar("R")

POLL_SEC = 0.2  # how often a waiting host looks again
PEER_GRACE_SEC = 5.0  # how long a host waits for its peer to start the same operation before it calls it elsewhere


class Slot(Generic[T]):
    """One thing the hosts of a run share, declared at import time by the module of the feature that owns it.
    `name` says what it holds (in reprs and `Shared.names`); `factory` makes a run's first value."""

    def __init__(self, name: str, factory: Callable[[], T]) -> None:
        self.name = name
        self.factory = factory

    def __call__(self, state: State | None = None) -> T:
        """This run's value (`state`: the run; by default the one pyinfra is preparing or running now)."""
        return shared(state).get(self)

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class Shared:
    """What the hosts of one run share: a value per slot used in the run, made on its first use."""

    def __init__(self) -> None:
        self._values: dict[Slot[Any], Any] = {}

    def get(self, slot: Slot[T]) -> T:
        if slot not in self._values:
            self._values[slot] = slot.factory()
        value: T = self._values[slot]
        return value

    def names(self) -> list[str]:
        """The names of the slots used in this run so far."""
        return sorted(slot.name for slot in self._values)


_RUNS: WeakKeyDictionary[State, Shared] = WeakKeyDictionary()


def shared(state: State | None = None) -> Shared:
    """The run's one `Shared` (`state`: by default the run pyinfra is preparing or running now)."""
    state = ctx_state.get() if state is None else state
    run = _RUNS.get(state)
    if run is None:
        run = _RUNS[state] = Shared()
    return run


@dataclass
class SharedOperation(Generic[R]):
    """One operation that several hosts of a run add from one call site: which hosts added it (with the hash pyinfra
    gave it on each), and what each host published from inside it."""

    ops: dict[str, str] = field(default_factory=dict)  # host name -> hash of the operation it added
    results: dict[str, R] = field(default_factory=dict)  # host name -> what it published

    def added(self, host: Host) -> None:
        """Record the operation `host` has just added (call it right after the `python.call`)."""
        self.ops[host.name] = host.op_hash_order[-1]

    def hosts(self, state: State) -> list[Host]:
        """The hosts that added the operation, in inventory order."""
        return [h for h in state.inventory if h.name in self.ops]

    def running_with(self, state: State, host: Host) -> list[Host]:
        """The hosts that added the operation as the one `host` runs now (so they run it at the same time)."""
        return [h for h in self.hosts(state) if self.ops[h.name] == host.executing_op_hash]

    def publish(self, host: Host, result: R) -> None:
        self.results[host.name] = result

    def wait(self, state: State, host: Host, peer: Host | None, deadline_sec: float | None = None,
             grace_sec: float | None = PEER_GRACE_SEC) -> str:
        """Inside the operation: wait until `peer` has published (see `wait_for_peer` for what it returns)."""
        return wait_for_peer(state, host, peer, lambda: peer is not None and peer.name in self.results,
                             deadline_sec, grace_sec)


def same_operation(host: Host, peer: Host) -> bool:
    """Whether `peer` runs the operation `host` runs now."""
    return peer.executing_op_hash == host.executing_op_hash


def wait_for_peer(state: State, host: Host, peer: Host | None, done: Callable[[], bool],
                  deadline_sec: float | None = None, grace_sec: float | None = PEER_GRACE_SEC) -> str:
    """Inside an operation that `host` shares with `peer`: wait until `done()`. Returns "done", or why not: "failed"
    (no peer, or it failed), "elsewhere" (after `grace_sec` the peer runs another operation, or none), "timeout"
    (after `deadline_sec`). None: no such limit."""
    start = _now()
    while not done():
        waited = _now() - start
        if peer is None or peer in state.failed_hosts:
            return "failed"
        if grace_sec is not None and waited > grace_sec and not same_operation(host, peer):
            return "elsewhere"
        if deadline_sec is not None and waited > deadline_sec:
            return "timeout"
        _sleep(POLL_SEC)
    return "done"


def _now() -> float:
    return time.monotonic()


def _sleep(seconds: float) -> None:
    gevent.sleep(seconds)
