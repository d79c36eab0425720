"""Host tools: specfleet's two host programs and a virtualenv with the pinned huggingface_hub."""

from __future__ import annotations

import re
import shlex
from importlib import resources

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, files, pip

from ._common import current_plan, differs, host_status

#: How long apt waits for the dpkg lock (held e.g. by unattended-upgrades after boot) before failing with
#: "Could not get lock /var/lib/dpkg/lock-frontend. It is held by process N (unattended-upgr)".
DPKG_LOCK_TIMEOUT_SEC = 600


@deploy("Host tools")
def tools():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    for path, what in ((s.data_dir, "specfleet data directory"), (p.bin, "specfleet bin directory")):
        if differs(plan, path):
            files.directory(name=what, path=path, user="root", group="root", mode="755")
    host_dir = resources.files("specfleet.host")
    for path, source in ((p.host_tool, "specfleet_host.py"), (p.fetch_tool, "fetch_model.py")):
        if differs(plan, path):
            files.put(name=f"Install {path.rsplit('/', 1)[1]}", src=str(host_dir / source), dest=path,
                      user="root", group="root", mode="755")
    pinned = re.fullmatch(r"huggingface_hub ?== ?([A-Za-z0-9.]+)", s.hub_client_requirement)
    if pinned and host_status(plan).hub_client == pinned.group(1):
        return  # the virtualenv already has exactly the pinned client
    # DGX OS 7 (Ubuntu 24.04) has no python3-venv by default, and unattended-upgrades may hold the dpkg lock
    # right after boot: apt waits for the lock (bounded) instead of failing at once.
    busy = host_status(plan).dpkg_busy
    if busy:
        logger.info(f"    [{host.name}] dpkg is busy ({', '.join(busy)}); installing python3-venv waits up to "
                    f"{DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock")
    apt.packages(name=f"python3-venv for the fetch virtualenv (waits up to {DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock)",
                 packages=["python3-venv"], update=False,
                 extra_install_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
    pip.venv(name="Fetch virtualenv", path=p.venv, python="python3")
    extra = f"--index-url {shlex.quote(s.pip_index_url)}" if s.pip_index_url else None
    pip.packages(name=f"Pinned {s.hub_client_requirement} in the fetch virtualenv",
                 packages=[s.hub_client_requirement], pip=f"{p.venv}/bin/pip", extra_install_args=extra)
