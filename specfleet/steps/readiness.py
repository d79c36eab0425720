"""Readiness: after a (re)start, /health must answer 200 within health_timeout_sec and the profile's
smoke completion must return non-empty text. Otherwise the host fails with the unit's last journal
lines, and the previous release (if any) is switched back in so the host keeps serving."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import server

from ._common import current_plan
from .service import needs_switch


@deploy("Readiness")
def readiness(health_timeout_sec: int | None = None):
    plan = current_plan()
    s, p = plan.settings, plan.paths
    if needs_switch(plan):
        timeout = f" --timeout {int(health_timeout_sec)}" if health_timeout_sec else ""
        server.shell(name="Readiness gate: /health, then the smoke completion",
                     commands=[f"{p.host_tool} --data-dir {s.data_dir} gate --revert{timeout}"])
        server.shell(name=f"Prune releases beyond keep_releases={s.keep_releases}",
                     commands=[f"{p.host_tool} --data-dir {s.data_dir} prune --keep {s.keep_releases}"])
