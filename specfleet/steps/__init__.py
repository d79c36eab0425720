"""Packaged deploys, one per concern. `converge(profile)` composes them in order."""

from __future__ import annotations

from pyinfra.api import deploy

from ._common import current_plan, pending
from .cleanup import cleanup
from .docker_access import docker_access
from .encodings import encodings
from .lock import CONVERGE_ID, lock, unlock
from .models import models
from .preflight import preflight
from .release import release
from .rollback import rollback
from .service import activate
from .token import token
from .tools import tools

__all__ = ["converge", "stage", "switch", "cleanup", "rollback", "lock", "unlock", "preflight", "docker_access",
           "token", "tools", "encodings", "models", "release", "activate"]


def _check_profile(profile: str) -> None:
    plan = current_plan()
    if plan.settings.profile_name != profile:
        raise SystemExit(f"specfleet: {plan.settings.host}: plan built for profile {plan.settings.profile_name}, "
                         f"deploy wants {profile}; run `pyinfra inventory.py deploys/{profile}.py`")


def converge(profile: str) -> None:
    """Turn the host into a trtllm-serve server for `profile`, idempotently."""
    _check_profile(profile)
    _converge()


@deploy("Converge")
def _converge() -> None:
    # A host with something to change is locked for this run (the lock a rollout takes): a second converge
    # or a rollout started meanwhile is refused instead of interleaving. A converged host is only read.
    preflight()
    work = pending(current_plan())
    if work:
        lock(CONVERGE_ID, kind="converge")
    _stage_steps(preflight_done=True)
    activate()
    if work:
        unlock(CONVERGE_ID, kind="converge")


def _stage_steps(preflight_done: bool = False) -> None:
    if not preflight_done:
        preflight()
    docker_access()
    token()
    tools()
    encodings()
    models()
    release()


@deploy("Stage")
def stage() -> None:
    """Everything but serving: preflight, access, token, tools, encodings, models, the new release."""
    _stage_steps()


@deploy("Switch")
def switch(health_timeout_sec: int | None = None) -> None:
    """Make the staged release current, restart, and gate it (reverting on failure)."""
    activate(health_timeout_sec)
