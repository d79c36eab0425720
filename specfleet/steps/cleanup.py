"""Cleanup (seed step 4): stop and disable the service and remove the container, and behind gateways the Spark's
gateway-facing units and files, and on a pair host its MPI trust and link (pair/steps/trust.py, pair/steps/link.py). The
model cache, encodings and releases stay unless purge_models is true; then they go too, with the release state (current
link, previous, gate state, job logs) and the token file. dockerd's OOM drop-in (memory/steps.py) goes; the running
dockerd keeps its figure until its next start; earlyoom's drop-in goes, and what the deploy did to earlyoom (installed
or enabled it) is undone. A gateway host: HAProxy stopped and removed with every file the gateway deploy wrote
(gateway/steps/gateways.py), then whatever it still holds from serving as a Spark before it joined the gateway group
(the same Spark-side removals, each only where the one status read finds it). A hub_mirror host: the image registry's
units and configs (mirror/steps/registry.py); its store only with purge_models."""

from __future__ import annotations

import shlex

from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd

from ..fleet.steps.state import current_plan, host_status
from ..gateway.steps.behind import remove_spark_side
from ..gateway.steps.gateways import gateway_cleanup
from ..memory.steps import remove_earlyoom
from ..mirror.steps.hub import mirror_status
from ..mirror.steps.registry import remove_registry
from ..pair.steps.link import remove_pair_link
from ..pair.steps.trust import remove_pair_trust


@deploy("Cleanup")
def cleanup():
    plan = current_plan()
    if plan.is_mirror:  # the image registry's units and configs; its store only when purging
        remove_registry(plan, mirror_status(plan), purge=plan.settings.purge_models)
    if plan.is_gateway:
        gateway_cleanup()  # then what a former Spark left: its unit, container and drop-in (none: nothing runs)
    s, layout = plan.settings, plan.paths
    st = host_status(plan)
    remove_spark_side(plan)
    unit = st.release.serving_unit or s.serving_unit  # what serves: the current release's unit (any engine's)
    if st.release.active not in ("inactive", "unknown", "") or st.release.enabled == "enabled":
        systemd.service(name=f"Stop and disable {unit}", service=f"{unit}.service", running=False, enabled=False)
    if st.release.container_running:
        server.shell(name=f"Remove container {unit}", commands=[f"docker rm -f {shlex.quote(unit)}"])
    remove_pair_trust(plan)  # a pair host's MPI key, login and host key pin
    remove_pair_link(plan)  # then its link: netplan file, link addresses, pair directory
    if layout.dockerd_oom_dropin in st.files.found:  # the running dockerd keeps its figure until its next start
        files.file(name=f"Remove {layout.dockerd_oom_dropin}", path=layout.dockerd_oom_dropin, present=False)
        systemd.daemon_reload(name="systemd daemon-reload (docker.service's drop-in removed; dockerd keeps running)")
    remove_earlyoom(plan)
    if s.purge_models:
        for path in (layout.hf_home, layout.drafts, layout.releases, layout.tiktoken, layout.jobs):
            files.directory(name=f"Purge {path}", path=path, present=False)
        files.link(name=f"Purge {layout.current}", path=layout.current, present=False)
        for path in (layout.previous, layout.gate_file, layout.mem_at_start, layout.container_memory,
                     layout.token_file):
            files.file(name=f"Purge {path}", path=path, present=False)
