"""The waits on a mirror host: for its loopback services after a (re)start (the deploy goes on only once they
answer), and for the result of its shared operations (the Hub warm-up, the image fetch) on the hosts that use it."""

from __future__ import annotations

import shlex
from typing import Any

from ...fleet.steps.coordination import SharedOperation
from ...fleet.steps.jobs import _say, run_on_host
from ..status import OLAH_READY


def wait_answers(state, host, python: str, url: str, unit: str, what: str) -> bool:
    """A loopback service answers HTTP at `url` (a Type=exec unit that dies after starting is not caught by
    systemctl): olah, the image registry. Its journal's tail, when it does not."""
    ok, _, _ = run_on_host(state, host, shlex.join([python, "-c", OLAH_READY, url]))
    if not ok:
        _, out, _ = run_on_host(state, host, f"journalctl -u {unit} -n 15 --no-pager")
        _say(host, f"{what} does not answer at {url}; its journal:", error=True)
        for line in out[-15:]:
            _say(host, f"    {line}", error=True)
    return ok


def mirror_succeeded(shared: SharedOperation[tuple[bool, Any]], state, host, plan) -> bool:
    """Whether the mirror's shared operation succeeded for a host that uses it. Where the mirror runs it as the very
    operation this host runs now (a CLI run), wait for its result: no deadline but its job's. Under pyinfra's Python
    API (operations identified by their index per host) it may be an earlier operation (its result is known) or a
    later one: then nothing can be waited for here (`specfleet rollout` runs it in a phase of its own first)."""
    for m in shared.running_with(state, host):
        shared.wait(state, host, m, grace_sec=None)  # until it ends or fails
    mirrors = shared.hosts(state)
    for m in mirrors:
        ok, _ = shared.results.get(m.name, (m not in state.failed_hosts, None))
        if not ok:
            return False
    # the mirror host failed before the operation (setup, unreachable)
    return bool(mirrors) or plan.mirror_name not in {h.name for h in state.failed_hosts}
