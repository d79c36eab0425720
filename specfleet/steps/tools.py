"""Host tools: specfleet's two host programs and a virtualenv with the pinned huggingface_hub."""

from __future__ import annotations

from importlib import resources

from pyinfra.api import deploy
from pyinfra.operations import apt, files, pip

from ._common import current_plan


@deploy("Host tools")
def tools():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    files.directory(name="specfleet data directory", path=s.data_dir, user="root", group="root", mode="755")
    files.directory(name="specfleet bin directory", path=p.bin, user="root", group="root", mode="755")
    host_dir = resources.files("specfleet.host")
    files.put(name="Install specfleet-host", src=str(host_dir / "specfleet_host.py"), dest=p.host_tool, mode="755")
    files.put(name="Install fetch-model", src=str(host_dir / "fetch_model.py"), dest=p.fetch_tool, mode="755")
    apt.packages(name="python3-venv for the fetch virtualenv", packages=["python3-venv"], update=False)
    pip.venv(name="Fetch virtualenv", path=p.venv, python="python3")
    extra = f"--index-url {s.pip_index_url}" if s.pip_index_url else None
    pip.packages(name=f"Pinned {s.hub_client_requirement} in the fetch virtualenv",
                 packages=[s.hub_client_requirement], pip=f"{p.venv}/bin/pip", extra_install_args=extra)
