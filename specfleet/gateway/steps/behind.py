"""A Spark behind the fleet's gateways: its filtering socket (the gateways' only way to trtllm-serve), its readiness
agent, a drop-in that marks every start of trtllm-serve for the agent, and gateways.json (what its drain before a
restart waits for). Written where they differ from the one status read; a Spark of a fleet without a gateway group
gets nothing here.

Sockets are (re)started only when their address changed. trtllm-serve itself is never restarted here: its unit (part
of the release) is the same with or without gateways, and the drop-in applies from its next start. So joining or
leaving a gateway is a converge that restarts no Spark."""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd

from ...fleet.steps.state import current_plan, differs, host_status
from ...host.layout import UNIT_DIR
from ..render import spark_files, spark_listens, spark_paths


@deploy("Behind the gateways")
def behind_gateways():
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    wanted = spark_files(s)
    if not wanted:
        remove_spark_side(plan)  # a fleet that dropped its gateway group: what it left goes (nothing otherwise)
        return
    if differs(plan, layout.agent_dir):
        files.directory(name=f"Readiness agent directory {layout.agent_dir}", path=layout.agent_dir,
                        user="root", group="root", mode="755")
    changed = [path for path in wanted if differs(plan, path)]
    for path in changed:
        files.put(name=f"Write {path}", src=StringIO(wanted[path]), dest=path, user="root", group="root", mode="644")
    if not any(path.startswith(UNIT_DIR + "/") for path in changed):
        return
    systemd.daemon_reload(name="systemd daemon-reload (the gateway-facing units changed)")
    units = _unit_names(changed)
    if not units:  # the start-marker drop-in alone: it applies from trtllm-serve's next start
        return
    listens = spark_listens(s)
    # Another set of gateways changes only a socket's IPAddressAllow=, which systemd applies to the running socket at
    # the daemon-reload (the socket unit's cgroup filter is replaced; seen on systemd 252, Debian 12): no restart,
    # nothing relayed is cut. A socket restarts (with its relay: Requires=) only when its address changed. A changed
    # service alone restarts if it runs.
    moved = [u for u in units if u in listens]
    restart_services = [u for u in units if u.endswith(".service") and u.replace(".service", ".socket") not in units]
    server.shell(name=f"Enable and (re)start {', '.join(units)}",
                 commands=[f"systemctl enable --now {shlex.join(listens)}",
                           *(f"[ \"$(systemctl show -p Listen --value {shlex.quote(u)})\" = "
                             f"{shlex.quote(listens[u])} ] || systemctl restart {shlex.quote(u)}" for u in moved),
                           *(f"systemctl try-restart {shlex.quote(u)}" for u in restart_services)])


def _unit_names(paths) -> list[str]:
    """The systemd units among `paths` (the drop-in, in a `.d` directory, is none)."""
    return [name for folder, _, name in (path.rpartition("/") for path in paths) if folder == UNIT_DIR]


def remove_spark_side(plan) -> None:
    """Stop and remove the gateway-facing units, gateways.json and the agent's directory where they exist (the
    cleanup deploy; a converge of a fleet without a gateway group)."""
    s, layout, found = plan.settings, plan.paths, host_status(plan).files.found
    present = [path for path in spark_paths(s) if path in found]
    if not present:
        return
    units = _unit_names(present)
    server.shell(name=f"Stop and remove {', '.join(units) or 'the gateway files'} (no gateway group)",
                 commands=[*(["systemctl disable --now " + shlex.join(units)] if units else []),
                           "rm -f " + shlex.join([*present, layout.started_marker]) + " && rm -rf "
                           + shlex.quote(layout.agent_dir),
                           f"rmdir --ignore-fail-on-non-empty {shlex.quote(layout.unit_dropins)} 2>/dev/null || true"])
    if any(path.startswith(UNIT_DIR + "/") for path in present):
        systemd.daemon_reload(name="systemd daemon-reload (the gateway-facing units are gone)")
