"""Service: make the staged release current and (re)start the systemd unit, only when something it
depends on changed (release id = config + unit + model commits + encodings) or it is not running.
A restart costs minutes of model load; daemon-reload happens only when the unit file itself changed."""

from __future__ import annotations

import hashlib

from pyinfra.api import deploy
from pyinfra.operations import server

from ..render import unit_text
from ._common import current_plan, host_status


def needs_switch(plan) -> bool:
    st = host_status(plan)
    unit_sha = hashlib.sha256(unit_text(plan.settings).encode()).hexdigest()
    return (st.current != plan.release_id or st.active != "active" or not st.container_running
            or st.unit_sha256 != unit_sha or st.enabled != "enabled")


@deploy("Service")
def service():
    plan = current_plan()
    if needs_switch(plan):
        server.shell(name=f"Switch to release {plan.release_id} and restart {plan.settings.service_name}",
                     commands=[f"{plan.paths.host_tool} --data-dir {plan.settings.data_dir} switch {plan.release_id}"])
