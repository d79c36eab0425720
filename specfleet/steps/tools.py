"""Host tools: specfleet's two host programs and a virtualenv with the pinned huggingface_hub."""

from __future__ import annotations

import re
import shlex
from importlib import resources

from pyinfra.api import deploy
from pyinfra.operations import apt, files, pip

from ._common import current_plan, differs, host_status


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
    apt.packages(name="python3-venv for the fetch virtualenv", packages=["python3-venv"], update=False)
    pip.venv(name="Fetch virtualenv", path=p.venv, python="python3")
    extra = f"--index-url {shlex.quote(s.pip_index_url)}" if s.pip_index_url else None
    pip.packages(name=f"Pinned {s.hub_client_requirement} in the fetch virtualenv",
                 packages=[s.hub_client_requirement], pip=f"{p.venv}/bin/pip", extra_install_args=extra)
