"""Host tools: specfleet's host programs (and the host layout they import) and a virtualenv with the pinned
huggingface_hub."""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, files, pip, server

from ...constants import DPKG_LOCK_TIMEOUT_SEC
from ...fleet.programs import program
from ...host.layout import AGENT_TOOL, DRAIN_FILE, HOST_PROGRAMS, LAYOUT_FILE, STATE_FILE, UNIT_DIR, program_mode
from .state import current_plan, differs, host_status, hub_client_ok

AGENT_READS = {AGENT_TOOL, DRAIN_FILE, STATE_FILE, LAYOUT_FILE}  # the readiness agent and the modules it imports


@deploy("Host tools")
def tools():
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    for path, what in ((s.data_dir, "specfleet data directory"), (layout.bin, "specfleet bin directory")):
        if differs(plan, path):
            files.directory(name=what, path=path, user="root", group="root", mode="755")
    installed = []
    for name, source in HOST_PROGRAMS.items():
        path = f"{layout.bin}/{name}"
        if differs(plan, path):
            files.put(name=f"Install {name}", src=str(program(source)), dest=path,
                      user="root", group="root", mode=program_mode(name))
            installed.append(name)
    agent_unit = f"{UNIT_DIR}/{s.unit_base}-agent.service"  # absent until behind_gateways writes it (later)
    if s.gateways and set(installed) & AGENT_READS and agent_unit in host_status(plan).files.found:
        # the long-lived agent runs what is installed from now on
        server.shell(name=f"Restart {s.unit_base}-agent.service if it runs (its program changed)",
                     commands=[f"systemctl try-restart {shlex.quote(s.unit_base + '-agent.service')}"])
    if hub_client_ok(plan):
        return  # the virtualenv already has exactly the pinned client
    # DGX OS 7 (Ubuntu 24.04) has no python3-venv by default, and unattended-upgrades may hold the dpkg lock
    # right after boot: apt waits for the lock (bounded) instead of failing at once.
    busy = host_status(plan).platform.dpkg_busy
    if busy:
        logger.info(f"    [{host.name}] dpkg is busy ({', '.join(busy)}); installing python3-venv waits up to "
                    f"{DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock")
    apt.packages(name=f"python3-venv for the fetch virtualenv "
                      f"(waits up to {DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock)",
                 packages=["python3-venv"], update=False,
                 extra_install_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
    pip.venv(name="Fetch virtualenv", path=layout.venv, python="python3")
    extra = f"--index-url {shlex.quote(s.pip_index_url)}" if s.pip_index_url else None
    pip.packages(name=f"Pinned {s.hub_client_requirement} in the fetch virtualenv",
                 packages=[s.hub_client_requirement], pip=f"{layout.venv}/bin/pip", extra_install_args=extra)
