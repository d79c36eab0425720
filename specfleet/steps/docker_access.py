"""Docker access: append the operator users to the docker group (never removing any other group).
Membership in docker is root-equivalent; it takes effect at the user's next login."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import server

from .state import current_plan, host_status


@deploy("Docker access")
def docker_access():
    plan = current_plan()
    groups = host_status(plan).groups
    for user in plan.settings.operator_users:
        if groups.get(user) is None or "docker" in groups[user]:
            continue  # missing users fail the preflight (naming them); members need nothing
        server.user(name=f"Append {user} to the docker group", user=user, groups=["docker"], append=True,
                    present=True, ensure_home=False)
