"""Pinned images through the mirror's registry (image_mirror): the mirror fetches each locked digest once, before any
Spark pulls it, and the Sparks pull it from there by digest and tag it as the reference their unit runs.

`image_warm` is ONE operation at ONE place in the converge/stage, shared by every host of the run, as the Hub
mirror's warm-up is (steps/hub.py): on the mirror it fetches the platform manifests that some Spark of the run still
lacks (image_fetch.py, a host job: one upstream download per manifest, resumed after a kill), on the Sparks it waits
for that result. Each Spark's pull comes after it (`image_pull`, called by the models step): nothing when its tag is
on the pinned image (host/docker_images.pinned: docker has it by a digest the lock records); a tag only when the
upstream reference by the lock's digest is there; otherwise a pull (image_pull.py, a host job with byte progress)
from the mirror, or, where the image is not pinned or image_mirror is off, from the image's own registry. A mirror
that is down or failed to fetch, or whose registry then fails this Spark's pull: image_fallback pulls from the image's
own registry with a warning; without it the Spark refuses with one line, and keeps serving.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.operations import python

from ...fleet.programs import program_text
from ...fleet.steps.coordination import SharedOperation, Slot
from ...fleet.steps.jobs import _follow, _say, run_on_host
from ...fleet.steps.state import STATUS_READS, current_plan, host_status, refuse
from ...host.layout import DOCKER_UNIT, REGISTRY_USER, MirrorLayout, main_pid
from ...pins.images import parse_reference
from ...pins.lock_images import image_digests
from ..rules import store_repository
from .ready import mirror_succeeded

FETCH = program_text("image_fetch.py")
PULL = program_text("image_pull.py")
INSECURE = program_text("insecure_registry.py")
ARCHES = {"aarch64": "arm64", "arm64": "arm64", "x86_64": "amd64", "amd64": "amd64"}  # uname -m -> OCI

_IMAGE_FETCH: Slot[SharedOperation[tuple[bool, str]]] = Slot("image fetch", SharedOperation)
_IMAGE_FALLBACK: Slot[set[str]] = Slot("image fallbacks", set)  # Sparks that pull from upstream instead
_FETCHED: Slot[dict[str, bool]] = Slot("image fetch results", dict)  # Spark -> whether its mirror's fetch succeeded


@dataclass(frozen=True)
class Pull:
    """How a Spark gets its image: `kind` none (its tag is there), tag (the upstream reference by the lock's digest
    is there: tagged, no bytes), mirror (pulled from the mirror's registry by the platform's digest), upstream (from
    the image's own registry by the lock's digest), tag-less (not pinned: pulled by its reference, as docker does),
    or refused (`why`)."""

    kind: str
    ref: str  # what is pulled or tagged from
    bytes: int | None  # the lock's compressed bytes for the host's platform (None: unknown)
    why: str  # where from, and why there

    def line(self) -> str:
        """THE one-line description of the pull (`specfleet plan`, the converge's pending list)."""
        if self.kind == "tag":
            return f"tag image {self.ref} (on the host: no bytes)"
        size = f"{self.bytes / 1e9:.2f} GB" if self.bytes is not None else "size unknown"
        return f"pull image {self.ref} ({size}) {self.why}"


def platform_of(arch: str) -> str:
    return f"linux/{ARCHES.get(arch, arch)}"


def pull_of(plan, st) -> Pull:
    """The decision, from the plan and the host's one status read (the steps and `specfleet plan` both ask)."""
    s = plan.settings
    if st.release.image_id:
        return Pull("none", s.image, 0, "")
    if not plan.image_digest or not plan.image_upstream:
        return Pull("tag-less", s.image, None, "from its registry, as docker does (not pinned in the lock: the mirror "
                                               "serves pinned digests only)")
    if st.mirror.upstream_id:
        return Pull("tag", plan.image_upstream, 0, "")
    platform = platform_of(st.platform.arch)
    entry = (plan.image_platforms or {}).get(platform)
    upstream_registry = parse_reference(plan.image_upstream).registry
    if s.image_registry is None:
        return Pull("upstream", plan.image_upstream, entry and entry["bytes"], f"({platform}) from {upstream_registry}")
    if entry is None:
        why = ("the lock records no image sizes (run: specfleet lock inventory.py)" if not plan.image_platforms
               else f"the lock records no {platform} manifest of it")
        return Pull("refused", plan.image_upstream, None, why)
    repo = store_repository(plan.image_upstream.partition("@")[0])
    return Pull("mirror", f"{s.image_registry}/{repo}@{entry['digest']}", entry["bytes"],
                f"({platform}) from {plan.mirror_name} ({s.image_registry})")


# ---- the mirror's fetch: the shared operation ------------------------------------------------------------------
def needed_images(state) -> list[tuple[str, str, int]]:
    """(upstream reference by platform digest, repository in the store, bytes) that some Spark of this run pulls
    from the mirror, from the status each of them read (the same decision its pull makes); each once."""
    statuses = STATUS_READS(state)
    out: dict[str, tuple[str, int]] = {}
    for other in state.inventory:
        plan = other.data.get("specfleet")
        if plan is None or plan.is_mirror or other.name not in statuses or plan.settings.profile is None:
            continue
        pull = pull_of(plan, statuses[other.name])
        if pull.kind == "mirror":
            repo, _, digest = pull.ref.partition("/")[2].rpartition("@")
            upstream = f"{plan.image_upstream.partition('@')[0]}@{digest}"
            out[upstream] = (repo, pull.bytes or 0)
    return [(src, repo, size) for src, (repo, size) in sorted(out.items())]


def _fetch_or_wait(state, host) -> bool:
    """The shared operation: the mirror fetches and publishes its result; a Spark waits for it and keeps it for its
    pull, which comes after (a Spark never fails here: its pull refuses, or falls back, with one line)."""
    plan = host.data.get("specfleet")
    fetch = _IMAGE_FETCH(state)
    if not plan.is_mirror:
        _FETCHED(state)[host.name] = not plan.mirror_down and mirror_succeeded(fetch, state, host, plan)
        return True
    s = plan.settings
    items = needed_images(state)
    if not items:
        fetch.publish(host, (True, s.image_registry or ""))
        return True
    p = MirrorLayout(s.mirror_cache_dir)
    argv = ["python3", "-c", FETCH, "--writer-config", p.writer_config, "--user", REGISTRY_USER]
    if s.ngc_api_key is not None:
        argv += ["--authfile", plan.paths.ngc_auth_file]  # a path: the key stays in its root-only file
    pinned = sorted({p["digest"] for other in state.inventory if (op := other.data.get("specfleet")) is not None
                     for p in (op.image_platforms or {}).values()})
    argv += ["--budget-bytes", str(s.image_store_budget_gb * 10**9), "--keep", ",".join(pinned)]
    for src, repo, size in items:
        argv += [src, repo, str(size)]
    key = "image-fetch:" + hashlib.sha256("\n".join(argv[7:]).encode()).hexdigest()[:16]
    _say(host, f"image registry: fetching {len(items)} image manifest(s), "
               f"{sum(i[2] for i in items) / 1e9:.2f} GB, into {s.image_store_dir} (one upstream download each)")
    ok = _follow(state, host, key, argv, {"PYTHONPATH": plan.paths.bin})  # its hostlib.py
    fetch.publish(host, (ok, s.image_registry or ""))
    return ok


def image_warm() -> None:
    """The shared fetch operation (see the module docstring), from ONE call site for every host: added on a mirror
    host that runs the registry, and on every Spark that pulls from it (so its pull is ordered after the fetch)."""
    plan = current_plan()
    if plan.is_mirror and not plan.settings.image_mirror:
        return
    if not plan.is_mirror and (plan.settings.profile is None or pull_of(plan, host_status(plan)).kind != "mirror"):
        return
    python.call(name="Image registry: fetch the pinned images the Sparks still lack (they pull from it afterwards)",
                function=_fetch_or_wait)
    if plan.is_mirror:
        _IMAGE_FETCH().added(host)


def _mirror_fetched(state, host, plan) -> bool:
    """Whether the mirror's fetch succeeded: as this Spark's share of the fetch operation found (a CLI run), or in
    an earlier phase (`specfleet rollout` fetches in its warm-up phase, and marks a failure)."""
    found = _FETCHED(state).get(host.name)
    if found is not None:
        return found
    return not plan.mirror_down and mirror_succeeded(_IMAGE_FETCH(state), state, host, plan)


# ---- a Spark's pull ----------------------------------------------------------------------------------------------
def _pull(state, host, pull: Pull) -> bool:
    plan = host.data.get("specfleet")
    s = plan.settings
    if pull.kind == "mirror" and not _mirror_fetched(state, host, plan):
        if not s.image_fallback:
            login = "" if plan.mirror_ngc_login else (" (it has no ngc_api_key_file: nvcr.io's anonymous tokens "
                                                       "expire mid-fetch)")
            _say(host, f"image mirror {plan.mirror_name} ({s.image_registry}) is down or failed to fetch "
                       f"{plan.image_upstream}{login}; not pulling (image_fallback: true would pull from "
                       f"{parse_reference(plan.image_upstream).registry}); this host keeps serving its current "
                       "release", error=True)
            return False
        _IMAGE_FALLBACK(state).add(host.name)
        logger.warning(f"{host.print_prefix}image mirror {plan.mirror_name} ({s.image_registry}) is down or failed "
                       f"to fetch; image_fallback: pulling {plan.image_upstream} from its own registry")
        pull = Pull("upstream", plan.image_upstream, pull.bytes, "(image_fallback)")
    if pull.kind != "mirror":
        return _run_pull(state, host, plan, pull)
    failed: list[str] = []  # why the pull from the registry failed (empty: the host was lost, nothing to fall back)
    trusted = s.image_registry in st_insecure(state, host) or _trust(state, host, plan, failed.append)
    if trusted and _run_pull(state, host, plan, pull, failed.append):
        return True
    return bool(failed) and _from_upstream_after(state, host, plan, pull, failed[0])


def _from_upstream_after(state, host, plan, pull: Pull, why: str) -> bool:
    """The mirror fetched, yet this Spark's pull from its registry failed (the registry died, dockerd would not trust
    it): image_fallback pulls from the image's own registry, saying so; without it, one line, and the host keeps
    serving its current release."""
    s = plan.settings
    mirror = f"image mirror {plan.mirror_name} ({s.image_registry})"
    upstream = parse_reference(plan.image_upstream).registry
    if not s.image_fallback:
        _say(host, f"{mirror}: pulling {pull.ref} from it failed after its fetch ({why}); not pulling from "
                   f"{upstream} (image_fallback: true would); this host keeps serving its current release", error=True)
        return False
    _IMAGE_FALLBACK(state).add(host.name)
    logger.warning(f"{host.print_prefix}{mirror}: pulling from it failed after its fetch ({why}); image_fallback: "
                   f"pulling {plan.image_upstream} from {upstream}")
    return _run_pull(state, host, plan, Pull("upstream", plan.image_upstream, pull.bytes, "(image_fallback)"))


def _run_pull(state, host, plan, pull: Pull, on_failure=None) -> bool:
    """image_pull.py as a host job: the tag, when the image under it is the pinned one; else a tag of the upstream
    reference by the lock's digest, where the host has it; else a pull of `pull.ref`, tagged."""
    s = plan.settings
    argv = ["python3", "-c", PULL, "--pull", pull.ref, "--tag", s.image, "--bytes", str(pull.bytes or 0),
            "--digests", ",".join(image_digests(plan.image_digest, plan.image_platforms))]
    if plan.image_upstream:
        argv += ["--have", plan.image_upstream]
    return _follow(state, host, f"pull:{pull.ref}", argv, {"PYTHONPATH": plan.paths.bin},  # its modules
                   on_failure=on_failure)


def st_insecure(state, host) -> tuple[str, ...]:
    st = STATUS_READS(state).get(host.name)
    return st.mirror.insecure if st is not None else ()


def _trust(state, host, plan, on_failure) -> bool:
    """dockerd reaches the mirror's registry over plain HTTP: insecure-registries merged into daemon.json and applied
    by SIGHUP (a reload: no container stops). Pulls are by digest, which docker verifies, so HTTP loses no integrity.
    A failure is handed to `on_failure` in one line."""
    registry = plan.settings.image_registry
    ok, out, err = run_on_host(state, host, shlex.join(["python3", "-c", INSECURE, "--add", registry,
                                                        "--pid-command", main_pid(DOCKER_UNIT)]))
    if ok:
        for line in out[-1:]:
            _say(host, line)
    else:
        on_failure(f"dockerd's trust of {registry}: {' '.join((out + err)[-1:]) or 'no output'}")
    return ok


def image_pull() -> None:
    """The Spark's pull of its image, decided from its one status read (see `pull_of`); nothing when it has it."""
    plan = current_plan()
    s = plan.settings
    pull = pull_of(plan, host_status(plan))
    if pull.kind == "none":
        return
    if pull.kind == "refused" and not s.image_fallback:
        refuse(name="Image pull", message=f"{host.name}: image_mirror: cannot pull {pull.ref} through "
                                          f"{plan.mirror_name} ({s.image_registry}): {pull.why} (image_fallback: "
                                          "true would pull it from its own registry); this host keeps serving")
        return
    if pull.kind == "refused":
        logger.warning(f"{host.print_prefix}image_fallback: pulling {pull.ref} from its own registry: {pull.why}")
        pull = Pull("upstream", pull.ref, None, "(image_fallback)")
    if pull.kind == "tag-less":
        python.call(name=f"Pull {pull.ref}", function=_follow, key=f"pull:{pull.ref}",
                    argv=["docker", "pull", pull.ref], env={})
        return
    python.call(name=pull.line(), function=_pull, pull=pull)
