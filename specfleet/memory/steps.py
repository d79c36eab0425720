"""Memory protection on a serving Spark: under memory pressure the kernel's OOM killer takes the serving container
first (`--oom-score-adj`, in the release's unit: render.OOM_SCORE_ADJ) and dockerd last (here). sshd's listener needs
nothing: OpenSSH's Linux build sets its own oom_score_adj to -1000 before it listens (platform_pre_listen ->
oom_adjust_setup); systemd (PID 1) is never a candidate. Debian's docker.io leaves dockerd at 0, docker-ce's unit at
-500: a drop-in sets it for every start of dockerd, and the running dockerd (docker.service's main process) gets it
at once (a docker restart would stop the serving container). Decided from the one status read; nothing runs on a
host that has both. A docker that is not docker.service (a snap) is not found: its figure is left as it is.

The kernel's OOM killer acts only when memory has run out, and on a GB10 the GPU's allocations are not charged to the
container's cgroup, so its cap does not hold them (docs/memory.md): a box can wedge in the driver first.
earlyoom (the distribution's package) watches MemAvailable, which does count them, and ends the process with the
highest oom_score, the container's, while its floor is left (earlyoom_available_gb, by default a quarter of
memory_reserve_gb). The deploy installs it where it is missing,
enables it, and gives it its command line in a drop-in; a marker records what it did (installed, or enabled), which
the cleanup deploy undoes. A floor of 0 leaves earlyoom as it is."""

from __future__ import annotations

from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, files, server, systemd

from ..constants import DPKG_LOCK_TIMEOUT_SEC
from ..fleet.status import sha256
from ..fleet.steps.state import current_plan, differs, host_status
from ..host.layout import DOCKER_UNIT, EARLYOOM_UNIT, main_pid
from .render import DOCKERD_OOM_SCORE_ADJ, dockerd_oom_dropin, earlyoom_dropin
from .rules import can_lower_scores, earlyoom_floor_gb

# the marker's texts: what the deploy did to earlyoom, which the cleanup deploy undoes (a host that ran it before: none)
EARLYOOM_INSTALLED = "installed by specfleet: the cleanup deploy purges the package\n"
EARLYOOM_ENABLED = "enabled and started by specfleet: the cleanup deploy disables and stops it\n"


def _dockerd_score(plan) -> int | None:
    """The running dockerd's OOM score when it is not the one wanted (None: it is, none runs, or not a serving
    Spark)."""
    now = host_status(plan).memory.dockerd_oom
    if plan.settings.profile is None or plan.is_mirror or now is None or now == DOCKERD_OOM_SCORE_ADJ:
        return None
    return now


def dockerd_work(plan) -> str | None:
    """The change to the running dockerd's OOM score, as `plan` says it (None: none, or none that can be made)."""
    now = _dockerd_score(plan)
    if now is None or not can_lower_scores(host_status(plan).memory.cap_bnd):
        return None
    return f"set the running dockerd's oom_score_adj {now} -> {DOCKERD_OOM_SCORE_ADJ}"


def dockerd_note(plan) -> str | None:
    """Why the running dockerd keeps a score the deploy would lower (None: it does not)."""
    now = _dockerd_score(plan)
    if now is None or can_lower_scores(host_status(plan).memory.cap_bnd):
        return None
    return (f"dockerd's oom_score_adj stays {now} (wanted {DOCKERD_OOM_SCORE_ADJ}): this host cannot lower an OOM "
            "score (no CAP_SYS_RESOURCE in its capability bounding set, as in a container)")


def earlyoom_managed(plan) -> bool:
    """A serving Spark whose earlyoom the deploy configures (a floor above 0)."""
    return plan.settings.profile is not None and not plan.is_mirror and earlyoom_floor_gb(plan.settings) > 0


def _earlyoom_steps(plan) -> tuple[bool, bool, bool]:
    """THE decision for a managed earlyoom, from the one status read: (install, enable, restart)."""
    binary, active, enabled = host_status(plan).memory.earlyoom
    rewrite = differs(plan, plan.paths.earlyoom_dropin)
    return not binary, not binary or enabled != "enabled", not binary or rewrite or active != "active"


def earlyoom_work(plan) -> list[str]:
    """What the deploy does to earlyoom beyond writing its drop-in (a `writes` line), as `plan` says it."""
    st = host_status(plan)
    if plan.settings.profile is None or plan.is_mirror:
        return []
    if not earlyoom_managed(plan):
        left = plan.paths.earlyoom_dropin in st.files.found or plan.paths.earlyoom_marker in st.files.found
        return ["undo what specfleet did to earlyoom (earlyoom_available_gb: 0)"] if left else []
    install, enable, restart = _earlyoom_steps(plan)
    floor = f"ends the serving container below {earlyoom_floor_gb(plan.settings):g} GB available"
    if install:
        return [f"install earlyoom from the distribution and start it ({floor})"]
    running = st.memory.earlyoom[1] == "active"
    verbs = (["enable"] if enable else []) + (["restart" if running else "start"] if restart else [])
    return [f"{' and '.join(verbs)} earlyoom ({floor})"] if verbs else []


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
    note = dockerd_note(plan)
    if note:
        logger.warning(f"    [{host.name}] {note}")
    work = dockerd_work(plan)
    if work:
        server.shell(name=f"{work[0].upper()}{work[1:]} (at once: no docker restart)",
                     commands=[f"p=$({main_pid(DOCKER_UNIT)}) && [ \"$p\" -gt 0 ] && "
                               f"echo {DOCKERD_OOM_SCORE_ADJ} > /proc/$p/oom_score_adj"])
    if earlyoom_managed(plan):
        _earlyoom(plan)
    else:  # a floor of 0: what an earlier deploy did to earlyoom is undone, as the cleanup does
        remove_earlyoom(plan)


def _earlyoom(plan) -> None:
    layout, st = plan.paths, host_status(plan)
    install, enable, restart = _earlyoom_steps(plan)
    if install:
        apt.packages(name=f"earlyoom from the distribution (waits up to {DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock)",
                     packages=["earlyoom"], update=False,
                     extra_install_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
    marker = EARLYOOM_INSTALLED if install else EARLYOOM_ENABLED if enable else None
    # the first deploy's record stands: it knows the host before
    if marker and layout.earlyoom_marker not in st.files.found:
        files.put(name=f"Record in {layout.earlyoom_marker} that specfleet {marker.split(' by ')[0]} earlyoom",
                  src=StringIO(marker), dest=layout.earlyoom_marker, user="root", group="root", mode="644")
    if differs(plan, layout.earlyoom_dropin):
        files.put(name=f"Write {layout.earlyoom_dropin} (earlyoom's floor and the processes it avoids)",
                  src=StringIO(earlyoom_dropin(plan.settings)), dest=layout.earlyoom_dropin,
                  user="root", group="root", mode="644")
        systemd.daemon_reload(name="systemd daemon-reload (earlyoom.service's drop-in)")
    commands = ([f"systemctl enable {EARLYOOM_UNIT}"] if enable else []) + \
        ([f"systemctl restart {EARLYOOM_UNIT}"] if restart else [])
    if commands:
        floor = earlyoom_floor_gb(plan.settings)
        verb = "Restart" if st.memory.earlyoom[1] == "active" else "Start"
        server.shell(name=f"{verb} earlyoom with specfleet's command "
                          f"line (it ends the serving container below {floor:g} GB available)",
                     commands=commands)


def remove_earlyoom(plan) -> None:
    """The cleanup's part: earlyoom's drop-in goes, and what the marker says the deploy did is undone (purged,
    disabled and stopped); an earlyoom that ran before the deploy is restarted with its own command line."""
    layout, st = plan.paths, host_status(plan)
    binary = st.memory.earlyoom[0]
    found: tuple[str, ...] = st.files.found.get(layout.earlyoom_marker) or ()
    did = {sha256(EARLYOOM_INSTALLED): "installed", sha256(EARLYOOM_ENABLED): "enabled"}.get(
        found[4] if len(found) > 4 else "")
    dropin = layout.earlyoom_dropin in st.files.found
    if dropin:
        files.file(name=f"Remove {layout.earlyoom_dropin}", path=layout.earlyoom_dropin, present=False)
        systemd.daemon_reload(name="systemd daemon-reload (earlyoom.service's drop-in removed)")
    if binary and did == "installed":
        server.shell(name="Purge earlyoom (specfleet installed it)",
                     commands=[f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -o "
                               f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC} earlyoom"])
    elif binary and did == "enabled":
        server.shell(name="Disable and stop earlyoom (specfleet enabled it)",
                     commands=[f"systemctl disable --now {EARLYOOM_UNIT}"])
    elif binary and dropin:
        server.shell(name="Restart earlyoom with its own command line (it ran before specfleet's deploy)",
                     commands=[f"systemctl try-restart {EARLYOOM_UNIT}"])
    if found:
        files.file(name=f"Remove {layout.earlyoom_marker}", path=layout.earlyoom_marker, present=False)
