"""Packaged deploys, one per concern. `converge(profile)` composes them in order."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.context import ctx_state

from ..fleet.steps.changes import changes, pending
from ..fleet.steps.coordination import Slot
from ..fleet.steps.lock import CONVERGE_ID, lock, unlock
from ..fleet.steps.state import current_plan, host_status
from ..fleet.steps.tools import tools
from ..gateway.steps.behind import behind_gateways
from ..gateway.steps.gateways import gateway
from ..memory.steps import oom_protection
from ..mirror.steps.hub import mirror_setup, mirror_warm
from ..mirror.steps.images import image_warm
from ..pair.steps.link import pair_link
from ..pair.steps.trust import pair_trust
from ..serving.render import profile_of
from ..serving.steps.docker_access import docker_access
from ..serving.steps.encodings import encodings
from ..serving.steps.models import models
from ..serving.steps.preflight import preflight
from ..serving.steps.release import release
from ..serving.steps.rollback import rollback
from ..serving.steps.service import activate
from ..serving.steps.token import token
from .cleanup import cleanup

# The deploys a project's deploy files call (`specfleet init` writes them); each composes the features' steps.
__all__ = ["converge", "stage", "switch", "cleanup", "rollback", "gateway", "mirror_setup"]


def _check_profile(profile: str) -> None:
    plan = current_plan()
    if plan.settings.profile_name != profile:
        raise SystemExit(f"specfleet: {plan.settings.host}: plan built for profile {plan.settings.profile_name}, "
                         f"deploy wants {profile}; run `pyinfra inventory.py deploys/{profile}.py`")


def converge(profile: str) -> None:
    """Turn the host into a trtllm-serve server for `profile`, idempotently (a host this run skips is left alone:
    a gateway host, or a Spark whose `serves` names another profile)."""
    plan = current_plan()
    if plan.skip:
        logger.info(f"[{host.name}] skipped: {plan.skip}")
        _count_restarts()
        return
    _check_profile(profile)
    _converge()


@deploy("Converge")
def _converge() -> None:
    # A host with something to change is locked for this run (the lock a rollout takes): a second converge
    # or a rollout started meanwhile is refused instead of interleaving. A converged host is only read.
    # A hub_mirror host serves no model: its converge sets up and warms the mirror (_stage_steps), nothing else.
    plan = current_plan()
    if not plan.is_mirror:
        preflight()
    _count_restarts()
    work = pending(plan) if not plan.is_mirror else []
    if work:
        lock(run_id=CONVERGE_ID, kind="converge")
    _stage_steps(preflight_done=True)  # one call site for every host (the mirror warm-up is a shared operation)
    if not plan.is_mirror:
        activate()
    if work:
        unlock(run_id=CONVERGE_ID, kind="converge")


# host name -> ((model, profile) when behind gateways, ready, restarts)
_RESTARTS: Slot[dict[str, tuple[tuple[str, str | None] | None, bool, bool]]] = Slot("converge restarts", dict)
# model -> every Spark of it in the fleet file; "read" -> the inventory names this run has read
_PEERS: Slot[dict[str, set[str]]] = Slot("converge model peers", lambda: {"read": set()})


def _count_restarts() -> None:
    """Once every host of a plain converge has read its status (pyinfra prepares all hosts before it runs any
    operation), say how many SERVING hosts this converge restarts at once: they all go down together, which
    `specfleet rollout` avoids (it switches in batches behind a gate). Behind gateways, a converge that would
    restart every ready host of a model is refused before anything changes: its clients would get 503s."""
    plan = current_plan()
    st = host_status(plan) if not (plan.is_mirror or plan.skip) else None
    state = ctx_state.get()
    seen = _RESTARTS(state)
    peers = _PEERS(state)
    peers["read"].add(plan.settings.host)
    if st is None:
        seen[host.name] = (None, False, False)
    else:
        if plan.settings.gateways:
            peers[profile_of(plan.settings)["target"]["repo"]] = set(plan.settings.model_peers)
        serving, s = st.release.active == "active" and st.release.container_running, plan.settings
        served = (profile_of(s)["target"]["repo"], s.profile_name) if s.gateways else None
        seen[host.name] = (served, serving and st.release.gate_passed(st.release.current or ""),
                           serving and bool(changes(plan).restart))
    if len(seen) < len(list(state.inventory.get_active_hosts())):
        return
    restarting = sorted(h for h, (_, _, restarts) in seen.items() if restarts)
    if len(restarting) > 1:
        logger.warning(f"specfleet: this converge restarts {len(restarting)} serving hosts at once "
                       f"({', '.join(restarting)}); use specfleet rollout to switch a serving fleet in batches")
    for model, profile in sorted({m for m, _, _ in seen.values() if m}):
        ready = [h for h, (m, is_ready, _) in seen.items() if m and m[0] == model and is_ready]
        if peers.get(model, set()) - peers["read"]:  # a --limit run: Sparks of the model outside it are not read
            continue
        if ready and all(seen[h][2] for h in ready):
            raise SystemExit(f"specfleet: {', '.join(sorted(ready))}: serves {model}: this converge would restart "
                             "every ready host of the model at once, leaving the gateways none to send its requests "
                             f"to; use `specfleet rollout inventory.py deploys/{profile}.py`, which "
                             "switches them in batches (or converge them a few at a time with --limit)")


def _stage_steps(preflight_done: bool = False) -> None:
    mirror = current_plan().is_mirror
    if mirror:
        mirror_setup()
    else:
        if not preflight_done:
            preflight()
        docker_access()
        oom_protection()  # dockerd last under memory pressure (the serving container goes first: its unit)
        token()
        tools()
        pair_link()  # a pair host's ConnectX-7 link: netplan try, confirmed over SSH (nothing on other hosts)
        pair_trust()  # a pair host's MPI key, login and host key pin
        behind_gateways()  # before any restart: the drain reads gateways.json and asks the agent's acks
        encodings()
    mirror_warm()  # one call site for every host: the mirror warms, the others wait for it (mirror/steps/hub.py)
    image_warm()  # the mirror's registry fetches the pinned images the Sparks lack (mirror/steps/images.py)
    if mirror:
        return
    models()
    release()


@deploy("Stage")
def stage() -> None:
    """Everything but serving: preflight, access, token, tools, encodings, models, the new release."""
    _stage_steps()


@deploy("Switch")
def switch(health_timeout_sec: int | None = None, skip_gateways: tuple[str, ...] = ()) -> None:
    """Make the staged release current, restart, and gate it (reverting on failure); the drain behind gateways
    does not wait for those in `skip_gateways` (their addresses)."""
    if current_plan().is_mirror:
        return
    activate(health_timeout_sec=health_timeout_sec, skip_gateways=skip_gateways)
