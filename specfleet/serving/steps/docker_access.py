"""Docker access: append the operator users to the docker group (never removing any other group).
Membership in docker is root-equivalent; it takes effect at the user's next login.

Who is missing comes from the status read (its `groups` lines), so the step runs one `usermod -a -G docker USER`
per missing user and gathers nothing else. pyinfra's server.user would first gather its Users fact, a shell loop
over every account of /etc/passwd (groups, home, lastlog): 14.6 s of a 314 s first converge on a TCG lab guest,
for a decision the status read has already made."""

from __future__ import annotations

import shlex

from pyinfra.api import deploy
from pyinfra.operations import server

from ...fleet.steps.state import current_plan, host_status


@deploy("Docker access")
def docker_access():
    plan = current_plan()
    groups = host_status(plan).files.groups
    for user in plan.settings.operator_users:
        if groups.get(user) is None or "docker" in groups[user]:
            continue  # missing users fail the preflight (naming them); members need nothing
        server.shell(name=f"Append {user} to the docker group", commands=[f"usermod -a -G docker {shlex.quote(user)}"])
