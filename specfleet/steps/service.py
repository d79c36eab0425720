"""Service: make the staged release current and prove it serves, as one host job (`specfleet-host activate`):
refs, unit (daemon-reload only when the unit file changed), `current` link, a restart only when something
it depends on changed (release id = config + unit + model commits + encodings) or the server is down, then
the readiness gate (/health, then the smoke completion). A failed restart or gate switches the previous
release back in and gates it, on the host, also when the controller is gone. The gate's outcome is host
state (gate.json): a release that has not passed its gate is not converged, so the next run gates it again.
Old releases beyond keep_releases are pruned afterwards (another host job)."""

from __future__ import annotations

import hashlib

from pyinfra.api import deploy

from ..render import unit_text
from ._common import current_plan, host_status
from .jobs import host_job


def switch_reasons(plan) -> list[str]:
    """Why the host must (re)activate the plan's release; empty when it serves it and it passed its gate."""
    st = host_status(plan)
    unit_sha = hashlib.sha256(unit_text(plan.settings).encode()).hexdigest()
    checks = (
        (st.current != plan.release_id, f"release {st.current or '(none)'} -> {plan.release_id}"),
        (st.unit_sha256 != unit_sha, "unit file differs"),
        (st.active != "active" or not st.container_running, f"not running ({st.active or 'no unit'})"),
        (st.enabled != "enabled", "not enabled at boot"),
        (not st.gate_passed(plan.release_id), f"gate not passed ({st.gate.get('result') or 'never gated'})"),
    )
    return [why for failed, why in checks if failed]


@deploy("Activate")
def activate(health_timeout_sec: int | None = None):
    plan = current_plan()
    s, p = plan.settings, plan.paths
    reasons = switch_reasons(plan)
    if not reasons:
        return
    argv = [p.host_tool, "--data-dir", s.data_dir, "activate", plan.release_id, "--revert"]
    if health_timeout_sec:
        argv += ["--timeout", str(int(health_timeout_sec))]
    host_job(name=f"Activate release {plan.release_id} and gate it ({'; '.join(reasons)})",
             key=f"activate:{plan.release_id}", argv=argv)
    host_job(name=f"Prune releases beyond keep_releases={s.keep_releases}", key="prune",
             argv=[p.host_tool, "--data-dir", s.data_dir, "prune", "--keep", str(s.keep_releases)])
