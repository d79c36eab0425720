"""Per-phase wall time of the VM tier: one row per test module, one per piece of session work.

Session fixtures (boot the fleet, prepare the lab, tear the fleet down) run inside whichever test first
needs them (or the last test, for teardown): their time is recorded as its own row and taken out of that
module's row, so a module's figure is the time of its own tests. Nested session work (a fixture that
needs another) is counted once, in the innermost row. The VM-tier total is the wall time of every item
under tests/vm, from the first start to the last end, minus the time spent outside tests/vm in between
(other tiers run between them: test_vm_fleet.py is sorted first)."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    tests: int = 0
    kind: str = "module"  # module | session


@dataclass
class PhaseClock:
    clock: callable = time.monotonic
    phases: dict[str, Phase] = field(default_factory=dict)
    _item: tuple[str, float] | None = None  # (module, start)
    _stack: list[list] = field(default_factory=list)  # [name, start, seconds of nested work]
    _inside_items: float = 0.0  # session work that happened inside the current item
    _first: float | None = None
    _last: float | None = None
    _items_total: float = 0.0

    def _phase(self, name: str, kind: str) -> Phase:
        if name not in self.phases:
            self.phases[name] = Phase(name, kind=kind)
        return self.phases[name]

    # -- items (one test: setup + call + teardown)
    def item_start(self, module: str) -> None:
        now = self.clock()
        self._item = (module, now)
        self._inside_items = 0.0
        if self._first is None:
            self._first = now

    def item_end(self) -> None:
        if self._item is None:
            return
        module, start = self._item
        now = self.clock()
        p = self._phase(module, "module")
        p.seconds += max(0.0, now - start - self._inside_items)
        p.tests += 1
        self._items_total += now - start
        self._last = now
        self._item = None

    # -- session work (a session fixture's setup or teardown)
    @contextlib.contextmanager
    def session_work(self, name: str):
        self._stack.append([name, self.clock(), 0.0])
        try:
            yield
        finally:
            name, start, nested = self._stack.pop()
            took = self.clock() - start
            self._phase(name, "session").seconds += max(0.0, took - nested)
            if self._stack:
                self._stack[-1][2] += took
            elif self._item is not None:
                self._inside_items += took

    # -- results
    def rows(self) -> list[Phase]:
        """Session work first (in the order it happened), then the modules in the order they ran."""
        return ([p for p in self.phases.values() if p.kind == "session"]
                + [p for p in self.phases.values() if p.kind == "module"])

    def vm_tier_seconds(self) -> float:
        """Wall time spent in VM-tier items (session work inside them included)."""
        return self._items_total

    def span_seconds(self) -> float:
        """From the first VM-tier item's start to the last one's end (other tiers in between included)."""
        return 0.0 if self._first is None or self._last is None else self._last - self._first

    def table(self) -> list[str]:
        rows = self.rows()
        if not rows:
            return []
        width = max(len(p.name) for p in rows + [Phase("VM tier total (wall)")])
        lines = [f"  {'phase'.ljust(width)}  {'tests':>5}  {'seconds':>8}"]
        for p in rows:
            tests = str(p.tests) if p.kind == "module" else "-"
            lines.append(f"  {p.name.ljust(width)}  {tests:>5}  {p.seconds:8.1f}")
        lines.append(f"  {'VM tier total (wall)'.ljust(width)}  {sum(p.tests for p in rows):>5}  "
                     f"{self.vm_tier_seconds():8.1f}")
        return lines
