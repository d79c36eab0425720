"""Preflight: read-only checks before anything on the host changes. A failure is one line naming the
host and what to do; that host is left untouched (the other hosts carry on).

DGX OS 7 (Ubuntu 24.04) specifics handled here (see docs/dgx-os.md): docker's
default runtime may be `nvidia` (accepted: `--gpus=all` is still what requests the GPU), the
docker-default AppArmor profile must be loadable, and docker's root dir usually shares the one disk
with data_dir, so an image still to pull counts against the same free space as the models."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy

from ...constants import GB
from ...fleet.steps.state import current_plan, host_status, missing, pair_peer, refuse
from ...mirror.steps.images import platform_of, pull_of
from ...pair import rules as pair_fleet
from ...pair.steps.link import link_problems
from ...pair.steps.trust import trust_problems


def problems_of(plan, st) -> list[str]:
    """Every reason to refuse this host, one clause each (empty: go ahead)."""
    s = plan.settings
    problems: list[str] = []
    pf, rel = st.platform, st.release
    if rel.release_state_error:
        problems.append(f"the release state under {s.data_dir} could not be read ({rel.release_state_error})")
    problems += _docker_problems(s, pf)
    if s.profile:
        problems += _serving_problems(plan, st)
    if s.pair:  # what `specfleet check` cannot know without the host: its interfaces and networks
        pair = st.pair
        problems += pair_fleet.host_problems(
            {k: getattr(s, k) for k in pair_fleet.HOST_CHECK_VARS}, pair.interfaces, pair.addresses, pair.links)
    for user in s.operator_users:
        if st.files.groups.get(user) is None:
            problems.append(f"operator user {user} does not exist on the host (operator_users)")
    return problems


def _docker_problems(s, pf) -> list[str]:
    """Docker on the host: its daemon, the GPU runtime and hook when gpus is true, AppArmor's docker-default."""
    problems: list[str] = []
    if pf.docker != "ok":
        problems.append(f"docker daemon not reachable ({pf.docker}); install docker and start docker.service")
    elif s.gpus and "nvidia" not in pf.runtimes:
        problems.append("gpus is true but docker has no nvidia runtime; install the NVIDIA container toolkit "
                        "(nvidia-ctk runtime configure --runtime=docker) or set gpus: false")
    elif s.gpus and pf.gpu_hook == "":
        # docker registers its --gpus device driver only when this binary is on dockerd's PATH
        # (moby daemon/nvidia_linux.go); without it `docker run --gpus=all` cannot start the server
        problems.append("gpus is true but nvidia-container-runtime-hook is not installed (docker's --gpus needs it); "
                        "install the NVIDIA container toolkit and restart docker, or set gpus: false")
    if pf.docker == "ok" and pf.apparmor and "apparmor" in pf.docker_security:
        enabled, loaded, parser = pf.apparmor
        if enabled == "Y" and loaded == "0" and not parser:
            # docker loads docker-default itself when it is missing (at start and before each container),
            # with apparmor_parser; without it every container start fails
            problems.append("AppArmor is enabled but docker's docker-default profile is not loaded and apparmor_parser "
                            "is missing, so containers cannot start; install the apparmor package and restart docker")
    return problems


def _serving_problems(plan, st) -> list[str]:
    """A host with a profile: disk for the models to fetch and the image to pull, and its serve port."""
    s, pf, rel = plan.settings, st.platform, st.release
    problems: list[str] = []
    models = sum(size for role in plan.pins for path, size in missing(plan, st, role) if "/snapshots/" in path)
    image, size, source = image_to_pull(plan, st)
    same_fs = pf.docker_root_same_fs is True
    need = models + (image if same_fs else 0)
    if need and pf.free_bytes < need + s.disk_headroom_gb * GB:
        pull = (f"{size} image to pull ({source}; the docker root dir {pf.docker_root} is on the same filesystem) + "
                if same_fs and image else "")
        problems.append(f"not enough disk under {s.data_dir}: {models / GB:.1f} GB of models to fetch + {pull}"
                        f"{s.disk_headroom_gb} GB headroom (disk_headroom_gb), {pf.free_bytes / GB:.1f} GB free")
    if image and pf.docker_root_same_fs is False and pf.docker_root_free < image:
        problems.append(f"not enough disk under the docker root dir {pf.docker_root} for the image to pull: "
                        f"{size} ({source}), {pf.docker_root_free / GB:.1f} GB free")
    if rel.listeners and rel.active != "active":
        problems.append(f"port {s.serve_port} is in use by another program (serve_port); "
                        "stop it or choose another port")
    return problems


def image_to_pull(plan, st) -> tuple[int, str, str]:
    """The bytes the image still to pull counts on the disk, as text, and where that figure comes from: the lock's
    compressed size for the host's platform (what the pull transfers), else image_size_gb (the lock records no size:
    an older lock, an image not pinned). 0 when nothing is pulled (the image is there, or only to be tagged)."""
    if st.platform.docker != "ok":
        return 0, "", ""
    pull = pull_of(plan, st)
    if pull.kind in ("none", "tag"):
        return 0, "", ""
    if pull.bytes is not None:
        return pull.bytes, f"{pull.bytes / GB:.2f} GB", f"the lock's {platform_of(st.platform.arch)} size"
    s = plan.settings
    return s.image_size_gb * GB, f"{s.image_size_gb} GB", "image_size_gb: the lock records no size for it"


def memory_problem(plan, st) -> str | None:
    """THE memory refusal (memory.Fit.problem): the profile's locked weights + overhead against MemTotal - reserve."""
    return plan.memory_fit.problem(st.memory.mem_total) if plan.memory_fit else None


@deploy("Preflight")
def preflight():
    plan = current_plan()
    st = host_status(plan)
    pf = st.platform
    extra = f" (default runtime {pf.default_runtime})" if pf.default_runtime not in ("", "runc") else ""
    logger.info(f"    [{host.name}] {pf.arch}, {pf.os}; docker {pf.docker}{extra}; "
                f"current release {st.release.current or '(none)'}")
    problems = problems_of(plan, st)
    memory = memory_problem(plan, st)
    if plan.settings.pair:
        problems += trust_problems(plan, st)
        peer = pair_peer(plan)
        peer_st = host_status(peer[0], on=peer[1]) if peer else None
        problems += link_problems(plan, st, peer[0], peer_st) if peer else []
        if peer and (problems_of(peer[0], peer_st) or trust_problems(peer[0], peer_st)
                     or memory_problem(peer[0], peer_st) or link_problems(peer[0], peer_st, plan, st)):
            problems.append(f"its pair's {peer[0].settings.pair_role} {plan.settings.pair_peer} fails its preflight "
                            "(a pair converges as one; see that host's line)")
    name = plan.settings.host  # the fleet file's name for it (THE `HOST: KEY: ...` form)
    lines = [f"{name}: {memory}"] if memory else []
    lines += [f"{name}: preflight: " + "; ".join(problems)] if problems else []
    if lines:
        refuse(name="Preflight checks", message="\n".join(lines))
