"""Every file a deploy writes on one host, as `specfleet render` shows it (pure): the files whose content the controller
renders, shown in full (secrets redacted), and the ones it cannot show, named with why (downloaded, generated on the
host, the package's own programs, or written as the host runs).

Each feature's content comes from its own rendering (serving/render.py, gateway/render.py, memory/render.py,
mirror/render.py, pair/render.py); this module only says which of them a deploy kind (deploy_scope.deploy_kind) writes
on which host."""

from __future__ import annotations

from dataclasses import dataclass, field

from .gateway.render import gateway_host_files, secret_paths, spark_files
from .host.layout import HOST_PROGRAMS, HOST_TOOL, MODULES, RECORD_FILE, GatewayLayout, MirrorLayout
from .memory.render import dockerd_oom_dropin, earlyoom_dropin
from .memory.rules import earlyoom_floor_gb
from .mirror.render import mirror_files, ngc_auth_text, registry_files
from .pair.render import netplan, sudoers
from .plan import HostPlan

SECRET_FILE = "<root-only: not shown>"


@dataclass
class Writes:
    shown: dict[str, str] = field(default_factory=dict)  # host path -> content (secrets redacted)
    named: dict[str, str] = field(default_factory=dict)  # host path -> why its content is not shown


def _programs(plan: HostPlan, names) -> dict[str, str]:
    return {plan.paths.bin: f"specfleet's host programs, from the installed package: {', '.join(names)}"}


def _spark(plan: HostPlan, w: Writes) -> None:
    s, lay = plan.settings, plan.paths
    w.shown.update(plan.files(redact=True))
    w.named[lay.release_dir(plan.release_id) + f"/{RECORD_FILE}"] = (
        "the release's record, written when it is staged (its creation time; `specfleet releases` shows it)")
    w.named.update(_programs(plan, HOST_PROGRAMS))
    for role, pin in sorted(plan.pins.items()):
        w.named[lay.hf_home] = w.named.get(lay.hf_home, "downloaded model files:")
        w.named[lay.hf_home] += f" {role} {pin.repo}@{pin.commit[:12]} ({len(pin.files)} files)"
    if s.profile and s.profile["tiktoken"]:
        w.named[lay.tiktoken] = f"downloaded encodings, checked against tiktoken_sha256 ({s.tiktoken_base_url})"
    w.shown.update(spark_files(s))
    w.shown[lay.dockerd_oom_dropin] = dockerd_oom_dropin()
    if earlyoom_floor_gb(s) > 0:
        w.shown[lay.earlyoom_dropin] = earlyoom_dropin(s)
        w.named[lay.earlyoom_marker] = "what the deploy did to earlyoom (installed or enabled it), for the cleanup"
    if s.pair:
        w.shown[lay.netplan_staged] = netplan(s)
        w.named[lay.pair_dir] = ("the pair's MPI key (made on the head), the worker's pinned host key and the "
                                 "authorized keys: read from the hosts during the deploy")
        if s.pair_role == "worker":
            w.shown[lay.sudoers_staged] = sudoers(lay)


def _mirror(plan: HostPlan, w: Writes) -> None:
    s, p = plan.settings, MirrorLayout(plan.settings.mirror_cache_dir)
    w.shown.update(mirror_files(s, plan.connection))
    w.shown.update(registry_files(s))
    w.named.update(_programs(plan, (HOST_TOOL, *MODULES)))
    if s.hf_token is not None:
        w.shown.update({plan.paths.token_file: plan.files(redact=True)[plan.paths.token_file]})
    auth = ngc_auth_text(s, redact=True)
    if auth is not None:
        w.shown[plan.paths.ngc_auth_file] = auth
    w.named[p.repos] = "the mirror's cache of the fleet's model files, filled by its warm-up"


def _gateway(plan: HostPlan, w: Writes) -> None:
    layout = GatewayLayout()
    files, _, problems = gateway_host_files(plan.settings, layout)
    for path, content in files.items():
        w.shown[path] = SECRET_FILE if path in secret_paths(layout) else content
    for problem in problems:
        w.named["(gateway files)"] = problem


def deploy_writes(plan: HostPlan, kind: str | None) -> Writes:
    """What a deploy of `kind` writes on the host of `plan` (a host it skips: nothing)."""
    w = Writes()
    if kind == "profile" and plan.is_mirror or kind == "hub_mirror" and plan.is_mirror:
        _mirror(plan, w)
    elif kind == "profile" and plan.settings.profile is not None:
        _spark(plan, w)
    elif kind == "gateway" and plan.is_gateway:
        _gateway(plan, w)
    return w
