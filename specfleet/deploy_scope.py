"""Which hosts a deploy file acts on, and why it leaves the others alone (pure): what `specfleet check` and `render`
say of each host before anything runs.

A deploy file says what it is by its top-level constants (read without executing it: plan.deploy_constant) and by the
packaged deploy it calls (`specfleet.steps`): a profile deploy (PROFILE) converges the Sparks that serve its profile
and sets up the Hub mirror on hub_mirror hosts; `gateway()` (ROLE "gateway") the gateway hosts; `mirror_setup()` (ROLE
"hub_mirror") the hub_mirror hosts; `rollback()` every Spark but a pair's worker (its head switches both); `cleanup()`
every host. Each skip reason is what the deploy itself logs when it leaves the host alone."""

from __future__ import annotations

import ast
from pathlib import Path

from .fleet.model import GATEWAY_GROUP, MIRROR_GROUP
from .plan import HostPlan, deploy_constant

STEPS = ("converge", "stage", "switch", "cleanup", "rollback", "gateway", "mirror_setup")  # specfleet.steps' deploys


def deploy_kind(deploy_file: str | Path) -> str | None:
    """"profile", "gateway", "hub_mirror", "rollback" or "cleanup" (None: a deploy file of another kind)."""
    if deploy_constant(deploy_file, "PROFILE"):
        return "profile"
    role = deploy_constant(deploy_file, "ROLE")
    if role in ("gateway", "hub_mirror"):
        return role
    called = _steps_called(deploy_file)
    for step, kind in (("gateway", "gateway"), ("mirror_setup", "hub_mirror"), ("rollback", "rollback"),
                       ("cleanup", "cleanup")):
        if step in called:
            return kind
    return None


def _steps_called(deploy_file: str | Path) -> set[str]:
    tree = ast.parse(Path(deploy_file).read_text(encoding="utf-8"))
    return {node.value.func.id for node in tree.body if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in STEPS}


def skip_reason(plan: HostPlan, kind: str | None, deploy_file: str) -> str | None:
    """Why the deploy leaves the host alone (None: it acts on it)."""
    s = plan.settings
    if kind == "profile":
        return plan.skip
    if kind == "gateway":
        return None if plan.is_gateway else f"not a {GATEWAY_GROUP} host: {deploy_file} converges the gateways only"
    if kind == "hub_mirror":
        return None if plan.is_mirror else f"not a {MIRROR_GROUP} host: {deploy_file} sets up the Hub mirror only"
    if kind == "rollback":
        if plan.is_gateway or plan.is_mirror:
            return f"a {GATEWAY_GROUP if plan.is_gateway else MIRROR_GROUP} host serves no model"
        if s.pair_role == "worker":
            return f"the worker of {s.pair}; its head {s.pair_peer} switches both back"
    return None


def scope(plans: dict[str, HostPlan], deploy_file: str) -> tuple[list[str], dict[str, str]]:
    """(the hosts the deploy acts on, host -> why it skips it), in inventory order."""
    kind = deploy_kind(deploy_file)
    skipped = {h: why for h, p in plans.items() if (why := skip_reason(p, kind, deploy_file)) is not None}
    return [h for h in plans if h not in skipped], skipped
