"""Preflight: read-only checks before anything on the host changes. A failure is one line naming the
host and what to do; that host is left untouched (the other hosts carry on)."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from ._common import current_plan, host_status, missing, refuse

GB = 1_000_000_000


@deploy("Preflight")
def preflight():
    plan = current_plan()
    s = plan.settings
    st = host_status(plan)
    logger.info(f"    [{host.name}] {st.arch}, {st.os}; docker {st.docker}; current release {st.current or '(none)'}")
    problems: list[str] = []
    if st.docker != "ok":
        problems.append(f"docker daemon not reachable ({st.docker}); install docker and start docker.service")
    elif s.gpus and "nvidia" not in st.runtimes:
        problems.append("gpus is true but docker has no nvidia runtime; install the NVIDIA container toolkit "
                        "(nvidia-ctk runtime configure --runtime=docker) or set gpus: false")
    if s.profile:
        need = sum(size for role in plan.pins for path, size in missing(plan, st, role) if "/snapshots/" in path)
        if need and st.free_bytes < need + s.disk_headroom_gb * GB:
            problems.append(f"not enough disk under {s.data_dir}: {need / GB:.1f} GB of models to fetch + "
                            f"{s.disk_headroom_gb} GB headroom (disk_headroom_gb), {st.free_bytes / GB:.1f} GB free")
        if st.listeners and st.active != "active":
            problems.append(f"port {s.serve_port} is in use by another program (serve_port); stop it or choose another port")
    for user in s.operator_users:
        if st.groups.get(user) is None:
            problems.append(f"operator user {user} does not exist on the host (operator_users)")
    if problems:
        refuse(name="Preflight checks", message=f"{host.name}: preflight: " + "; ".join(problems))
