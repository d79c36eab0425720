"""Rollback: return the host to its previous release (or `rollback_to`), through the same activate job and
readiness gate (a target that fails its gate is reverted). Nothing is downloaded: a kept release's files
and model snapshots are all still on the host."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from ...fleet.steps.jobs import host_job
from ...fleet.steps.lock import CONVERGE_ID, lock, unlock
from ...fleet.steps.state import current_plan, differs, host_status, refuse


@deploy("Rollback")
def rollback():
    plan = current_plan()
    if plan.is_gateway or plan.is_mirror:  # they serve no model: no release to return to
        logger.info(f"[{host.name}] skipped: a {'gateway' if plan.is_gateway else 'hub_mirror'} host serves no model")
        return
    s, layout = plan.settings, plan.paths
    if s.pair_role == "worker":  # its head's switch returns it, to the worker release the head's release names
        logger.info(f"[{host.name}] skipped: the worker of {s.pair}; its head {s.pair_peer} switches both back")
        return
    st = host_status(plan)
    target = s.rollback_to or st.release.previous
    if not target:
        refuse(name="Choose the release to return to",
               message=f"{host.name}: rollback: no previous release recorded "
                       f"(releases: {' '.join(st.release.releases) or 'none'})")
        return
    if target not in st.release.releases:
        refuse(name="Choose the release to return to",
               message=f"{host.name}: rollback_to: release {target} is not on this host "
                       f"(kept: {' '.join(st.release.releases) or 'none'})")
        return
    if target == st.release.current and st.release.active == "active" and st.release.gate_passed(target):
        return
    lock(CONVERGE_ID, kind="rollback")  # never interleaved with a converge or a rollout on the same host
    # --rollback: a head leaving its pair's release asks its worker to serve alone again (a host tool that predates
    # the flag, before the next converge updates it, knows no pair to leave: it is not given it)
    flag = () if differs(plan, layout.host_tool) else ("--rollback",)
    argv = layout.host_tool_argv("activate", target, "--revert", *flag)
    name = f"Switch back to release {target} and gate it"
    if not s.gateways:  # all at once
        host_job(name=name, key=f"activate:{target}", argv=argv)
    else:
        # behind gateways, one Spark after the other, each drained, switched and gated before the next, so the others
        # serve the gateways' clients; in reverse inventory order, the rollout's order backwards: every mix of
        # releases the fleet passes through is one the rollout already served (its canary leaves the new release
        # last). One operation per host, ordered by its place in the loop (pyinfra's --serial order is a set's).
        for name_in_order in host.loop(reversed([h.name for h in host.inventory])):
            if name_in_order == host.name:
                host_job(name=f"{name} (one Spark at a time, in reverse inventory order)", key=f"activate:{target}",
                         argv=argv)
    unlock(CONVERGE_ID, kind="rollback")
