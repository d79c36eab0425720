"""Service: make the staged release current and prove it serves, as one host job (`specfleet-host activate`):
refs, unit (daemon-reload only when the unit file changed), `current` link, a restart only when something
it depends on changed (release id = config + unit + model commits + encodings) or the server is down, then
the readiness gate (/health, then the smoke completion). A failed restart or gate switches the previous
release back in and gates it, on the host, also when the controller is gone. The gate's outcome is host
state (gate.json): a release that has not passed its gate is not converged, so the next run gates it again.
Old releases beyond keep_releases are pruned afterwards, by the same job once the gate passed (a job of its own cost
a second job start and its polls: 6-9 s a switch on a TCG lab guest)."""

from __future__ import annotations

from pyinfra.api import deploy

from ...fleet.status import sha256
from ...fleet.steps.jobs import host_job
from ...fleet.steps.state import current_plan, host_status
from ..render import RENDERING_CHANGED

RESTARTS = ("release", "unit", "down")  # kinds of switch reason that restart the server (the others only enable/gate)


def switch_checks(plan) -> list[tuple[str, str]]:
    """(kind, why) for each reason the host must (re)activate the plan's release: release (what changed: config,
    model, image, ...), unit, down (not running), enable (not enabled at boot), gate (not passed)."""
    st = host_status(plan).release
    unit_sha = sha256(plan.rendered.unit)
    checks = (
        (st.current != plan.release_id, "release", f"release {st.current or '(none)'} -> {plan.release_id}"
                                                   + _what_changed(plan, st.current_release if st.current else {})),
        (st.unit_sha256 != unit_sha, "unit", "unit file differs"),
        (st.active != "active" or not st.container_running, "down", f"not running ({st.active or 'no unit'})"),
        (st.enabled != "enabled", "enable", "not enabled at boot"),
        (not st.gate_passed(plan.release_id), "gate",
         "the container started again since its gate passed" if st.gate.get("release") == plan.release_id
         and st.gate.get("result") == "passed" else f"gate not passed ({st.gate.get('result') or 'never gated'})"),
    )
    return [(kind, why) for failed, kind, why in checks if failed]


def switch_reasons(plan) -> list[str]:
    """Why the host must (re)activate the plan's release; empty when it serves it and it passed its gate."""
    return [why for _, why in switch_checks(plan)]


def _what_changed(plan, old: dict) -> str:
    """What differs between the release the host serves (its release.json) and the plan's: ' (config, ...)'."""
    if not old or old.get("id") == plan.release_id:
        return ""
    new = plan.release_record("")
    out = []
    bumps = range(old.get("rendering", 1) + 1, new["rendering"] + 1)
    if any(plan.settings.trtllm_version in RENDERING_CHANGED.get(n, ()) for n in bumps):
        out.append(f"specfleet renders differently: rendering {old.get('rendering', 1)} -> {new['rendering']} "
                   "(docs/upgrades.md)")
    if old.get("profile") != new["profile"]:
        out.append(f"profile {old.get('profile')} -> {new['profile']}")
    elif old.get("config_sha256") != new["config_sha256"]:
        out.append("config")
    old_models, new_models = old.get("models") or {}, new["models"]
    for role in sorted(set(old_models) | set(new_models)):
        a, b = old_models.get(role) or {}, new_models.get(role) or {}
        if (a.get("repo"), a.get("commit")) != (b.get("repo"), b.get("commit")):
            left = f"{a.get('repo')}@{str(a.get('commit'))[:12]}" if a else "none"
            right = f"{b['repo']}@{b['commit'][:12]}" if b else "none"
            out.append(f"{role} model {left} -> {right}" if a.get("repo") != b.get("repo") or not a or not b
                       else f"{role} model {b['repo']} {str(a.get('commit'))[:12]} -> {b['commit'][:12]}")
    if old.get("image") != new["image"]:
        out.append(f"image {old.get('image')} -> {new['image']}")
    old_worker, new_worker = (((r.get("pair") or {}).get("worker") or {}).get("release") for r in (old, new))
    if old_worker != new_worker and old_worker and new_worker:
        out.append(f"the pair's worker release {old_worker} -> {new_worker}")
    if not out:
        out.append("unit, smoke request or encodings")
    return f" ({'; '.join(out)})"


@deploy("Activate")
def activate(health_timeout_sec: int | None = None, skip_gateways: tuple[str, ...] = ()):
    """`skip_gateways`: addresses of gateways the drain does not wait for (a rollout's --without-gateway)."""
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    reasons = switch_reasons(plan)
    if not reasons or s.pair_role == "worker":  # a pair's worker is switched by its head's job (pair_switch.py)
        return
    argv = layout.host_tool_argv("activate", plan.release_id, "--revert", "--prune", str(s.keep_releases))
    if health_timeout_sec:
        argv += ["--timeout", str(int(health_timeout_sec))]
    for address in skip_gateways:
        argv += ["--skip-gateway", address]
    host_job(name=f"Activate release {plan.release_id} and gate it ({'; '.join(reasons)})",
             key=f"activate:{plan.release_id}", argv=argv)  # then it prunes beyond keep_releases (--prune)
