"""Packaged deploys, one per concern. `converge(profile)` composes them in order."""

from __future__ import annotations

from pyinfra.api import deploy

from ._common import current_plan
from .cleanup import cleanup
from .docker_access import docker_access
from .encodings import encodings
from .models import models
from .preflight import preflight
from .readiness import readiness
from .release import release
from .service import service
from .token import token
from .tools import tools

__all__ = ["converge", "cleanup", "preflight", "docker_access", "token", "tools", "encodings", "models",
           "release", "service", "readiness"]


def converge(profile: str) -> None:
    """Turn the host into a trtllm-serve server for `profile`, idempotently."""
    plan = current_plan()
    if plan.settings.profile_name != profile:
        raise SystemExit(f"specfleet: {plan.settings.host}: plan built for profile {plan.settings.profile_name}, "
                         f"deploy wants {profile}; run `pyinfra inventory.py deploys/{profile}.py`")
    _converge()


@deploy("Converge")
def _converge() -> None:
    preflight()
    docker_access()
    token()
    tools()
    encodings()
    models()
    release()
    service()
    readiness()
