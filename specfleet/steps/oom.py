"""Memory protection on a serving Spark: under memory pressure the kernel's OOM killer takes the serving container
first (`--oom-score-adj`, in the release's unit: render.OOM_SCORE_ADJ) and dockerd last (here). sshd's listener needs
nothing: OpenSSH's Linux build sets its own oom_score_adj to -1000 before it listens (platform_pre_listen ->
oom_adjust_setup); systemd (PID 1) is never a candidate. Debian's docker.io leaves dockerd at 0, docker-ce's unit at
-500: a drop-in sets it for every start of dockerd, and the running dockerd (docker.service's main process) gets it
at once (a docker restart would stop the serving container). Decided from the one status read; nothing runs on a
host that has both. A docker that is not docker.service (a snap) is not found: its figure is left as it is."""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd

from ..host.layout import DOCKER_UNIT, main_pid
from ..render import DOCKERD_OOM_SCORE_ADJ, dockerd_oom_dropin
from .state import current_plan, differs, host_status


def dockerd_work(plan) -> str | None:
    """The change to the running dockerd's OOM score, as `plan` says it (None: none, or not a serving Spark)."""
    now = host_status(plan).dockerd_oom
    if plan.settings.profile is None or plan.is_mirror or now is None or now == DOCKERD_OOM_SCORE_ADJ:
        return None
    return f"set the running dockerd's oom_score_adj {now} -> {DOCKERD_OOM_SCORE_ADJ}"


@deploy("Memory protection")
def oom_protection():
    plan = current_plan()
    if plan.settings.profile is None or plan.is_mirror:
        return
    path = plan.paths.dockerd_oom_dropin
    if differs(plan, path):
        files.put(name=f"Write {path} (dockerd's OOM score from its next start)", src=StringIO(dockerd_oom_dropin()),
                  dest=path, user="root", group="root", mode="644")
        systemd.daemon_reload(name="systemd daemon-reload (docker.service's drop-in; dockerd keeps running)")
    work = dockerd_work(plan)
    if work:
        server.shell(name=f"{work[0].upper()}{work[1:]} (at once: no docker restart)",
                     commands=[f"p=$({main_pid(DOCKER_UNIT)}) && [ \"$p\" -gt 0 ] && "
                               f"echo {DOCKERD_OOM_SCORE_ADJ} > /proc/$p/oom_score_adj"])
