"""Docker access: append the operator users to the docker group (never removing any other group).
Membership in docker is root-equivalent; it takes effect at the user's next login."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Users
from pyinfra.operations import server

from ._common import current_plan


@deploy("Docker access")
def docker_access():
    users = host.get_fact(Users) or {}
    for user in current_plan().settings.operator_users:
        if user not in users:
            continue  # preflight has already failed this host, naming the user
        server.user(name=f"Append {user} to the docker group", user=user, groups=["docker"], append=True,
                    present=True, ensure_home=False)
