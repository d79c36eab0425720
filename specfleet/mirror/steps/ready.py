"""The wait after a (re)start of a mirror host's loopback services: the deploy goes on only once they answer."""

from __future__ import annotations

import shlex

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
