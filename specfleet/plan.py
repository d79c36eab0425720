"""The per-host plan a deploy applies: validated settings + pinned models + the release they make.

Built once on the controller (by inventory.py for pyinfra runs, by the CLI for `check`/`render`),
before any host is contacted. Data flows one way: fleet file -> one parsed fleet (fleet/model.py) -> settings ->
plan -> operations.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from .constants import DEFAULT_INVENTORY, EXIT_INVALID
from .fleet.inventory import Inventory, InventoryError, load_inventory
from .fleet.model import Fleet, read_fleet
from .fleet.problems import Problem, grouped_lines
from .fleet.profiles import ProfileError
from .fleet.project import project_dir, use_project
from .fleet.settings import Settings, build_fleet
from .gateway import rules as gateway_fleet
from .gateway.keys import gateway_secrets
from .host.layout import Layout
from .memory.rules import Fit, fit
from .mirror.render import advertised_url
from .mirror.rules import budget_problem
from .pair.render import pair_record
from .pins.lockfile import lock_path, pins_from_lock, shown
from .pins.models import ModelPin, resolve_pins
from .serving.render import RENDERING, config_yaml, profile_of, rendered_files, smoke_request, unit_text


class PlanError(Exception):
    """User error: `lines` are the one-line problems to print; nothing on any host was touched."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class HostPlan:
    settings: Settings
    connection: dict
    pins: dict[str, ModelPin] = field(default_factory=dict)
    image_digest: str | None = None  # the lock's registry digest of the image (None: not in a registry, run by tag)
    image_upstream: str | None = None  # pinned: the image in its own registry by that digest (registry/name@sha256:..)
    # the lock's platform table of that digest: {"linux/arm64": {"digest": ..., "bytes": compressed}} (None: size
    # unknown, as with a lock written before sizes were recorded)
    image_platforms: dict[str, dict] | None = None
    is_mirror: bool = False  # a host of the hub_mirror group: runs the fleet's Hub mirror, serves no model
    is_gateway: bool = False  # a host of the gateway group: runs the fleet's gateway (deploys/gateway.py)
    # the hub_mirror group's (first) mirror; hosts whose hub_endpoint it is wait for its warm-up
    mirror_url: str | None = None
    mirror_name: str | None = None  # that mirror's inventory name
    # that mirror's upstream Hub (its hub_endpoint): where hub_fallback goes when it is down
    hub_upstream: str | None = None
    mirror_down: bool = False  # set by `specfleet rollout` when the mirror failed its warm-up phase
    mirror_ngc_login: bool = False  # that mirror fetches images with an NGC API key (ngc_api_key_file)
    # why this run leaves the host alone (a gateway host, or a Spark that serves another profile); None: it does not
    skip: str | None = None
    pair_worker: HostPlan | None = None  # a pair's head: its worker's plan (the head's release covers the worker's)
    notes: list[str] = field(default_factory=list)  # what `specfleet check` says of the host beyond its pins
    # Values derived from (settings, pins), computed once. pyinfra hands out a shallow copy of host data on every
    # access, so the memo is a dict that all those copies share.
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def uses_mirror(self) -> bool:
        return self.is_mirror or (self.mirror_url is not None and self.settings.hub_endpoint == self.mirror_url)

    @property
    def paths(self) -> Layout:
        return Layout.of(self.settings)

    def derived(self, name: str, compute):
        """`compute(self)`, once per (settings, pins): recomputed only when either is replaced."""
        worker = self.pair_worker.release_id if self.pair_worker else None
        hit = self._memo.get(name)
        if hit is None or hit[0] is not self.settings or hit[1] is not self.pins or hit[2] != worker:
            hit = self._memo[name] = (self.settings, self.pins, worker, compute(self))
        return hit[3]

    @property
    def memory_fit(self) -> Fit | None:
        """What one node needs of its unified memory for the profile (memory.fit); None where it serves nothing of
        this deploy (no profile, a Hub mirror, a host this deploy skips)."""
        if self.is_mirror or self.skip:
            return None
        return self.derived("memory_fit", lambda plan: fit(plan.settings, plan.pins))

    @property
    def rendered(self) -> Rendered:
        """The release's files and id: the steps read them many times a run."""
        return self.derived("rendered", lambda plan: Rendered.of(
            plan.settings, plan.pins, plan.pair_worker.release_id if plan.pair_worker else None))

    @property
    def release_id(self) -> str:
        """Content address of what is served: same inputs -> same release (so re-runs change nothing)."""
        return self.rendered.release_id

    def release_record(self, created: str) -> dict:
        s = self.settings
        health_host = "127.0.0.1" if s.serve_host in ("0.0.0.0", "::") else s.serve_host
        if ":" in health_host:
            health_host = f"[{health_host}]"
        return {
            "id": self.release_id,
            "created": created,
            "profile": s.profile_name,
            "image": s.image,
            "service": s.serving_unit,
            "models": {role: {"repo": p.repo, "revision": p.revision, "commit": p.commit,
                              "files": len(p.files), "bytes": p.size}
                       for role, p in sorted(self.pins.items())},
            "served_model": profile_of(s)["target"]["repo"],
            "url": f"http://{health_host}:{s.serve_port}",
            "gate": {"health_timeout_sec": s.health_timeout_sec, "health_interval_sec": s.health_interval_sec,
                     "smoke_timeout_sec": s.smoke_timeout_sec},
            "config_sha256": hashlib.sha256(self.rendered.config.encode()).hexdigest(),
            "rendering": RENDERING,
            "trtllm_version": s.trtllm_version,
            # the engine and where its server counts acceptance (overview/host/overview.py reads them there)
            "engine": s.engine.name, "counters": s.engine.counters.record(), "options_file": s.engine.options_file,
            **({"pair": pair_record(s, self.pair_worker.release_id if self.pair_worker else None)} if s.pair else {}),
        }

    def files(self, redact: bool = True) -> dict[str, str]:
        return rendered_files(self.settings, redact=redact, release=self.rendered if self.settings.profile else None)


@dataclass(frozen=True)
class Rendered:
    """What a release serves, rendered from one host's settings and model pins."""

    config: str  # extra-llm-api-config.yml
    unit: str  # the systemd unit
    smoke: str  # the smoke request's JSON body
    release_id: str

    @classmethod
    def of(cls, s: Settings, pins: dict[str, ModelPin], pair_worker_release: str | None = None) -> Rendered:
        """`pair_worker_release`: a pair's head's worker's release id, which the head's id covers."""
        config, unit, smoke = config_yaml(s), unit_text(s), smoke_request(s)
        material = {
            "config": config, "unit": unit, "smoke": smoke,
            "models": {role: [p.repo, p.commit] for role, p in sorted(pins.items())},
            "tiktoken": s.tiktoken_sha256 if profile_of(s)["tiktoken"] else None,
        }
        if pair_worker_release:
            material["pair_worker_release"] = pair_worker_release
        digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
        return cls(config, unit, smoke, f"r-{digest[:12]}")


def inventory_path() -> Path:
    """$SPECFLEET_INVENTORY (relative to the cwd), else inventory/fleet.yml of the project (fleet/project.py)."""
    return Path(os.environ.get("SPECFLEET_INVENTORY") or project_dir() / DEFAULT_INVENTORY)


def deploy_constant(deploy_file: str | Path, name: str) -> str | None:
    """A constant a deploy file declares at its top level (read without executing it), e.g. PROFILE or ROLE."""
    tree = ast.parse(Path(deploy_file).read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return cast(str | None, node.value.value)  # a deploy file's constants: PROFILE, ROLE
    return None


def deploy_profile(deploy_file: str | Path) -> str | None:
    """The PROFILE a deploy file declares; None for profile-less deploys."""
    return deploy_constant(deploy_file, "PROFILE")


def role_problems(plans: dict[str, HostPlan], deploy_files) -> list[str]:
    """What a deploy needs on the controller before anything changes: for ROLE "gateway", each gateway host's API
    keys and TLS files readable and well-formed (api_keys.gateway_secrets; no line shows a secret)."""
    out = []
    if any(deploy_constant(f, "ROLE") == "gateway" for f in deploy_files):
        out += [f"{h}: {problem}" for h, plan in plans.items() if plan.is_gateway
                for problem in gateway_secrets(plan.settings)[2]]
    return out


def load_inventory_or_fail(path: Path | None = None) -> Inventory:
    path = path or inventory_path()
    if not path.exists():
        hint = ("set SPECFLEET_INVENTORY to your fleet file" if "SPECFLEET_INVENTORY" not in os.environ
                else "SPECFLEET_INVENTORY names a file that does not exist")
        raise PlanError([f"{path}: inventory not found "
                         f"({hint}; `specfleet init DIR` writes a project with an example fleet file)"])
    try:
        return load_inventory(path)
    except InventoryError as exc:
        raise PlanError([str(exc)]) from None


def fleet_plans(inventory_file: str, profile: str | None = None,
                resolve: bool = False) -> tuple[Inventory, dict[str, HostPlan]]:
    """What every read-only command starts from: the project of `inventory_file`, its fleet file and one validated
    plan per host (pins from the lock unless `resolve`). Bad input raises PlanError (one line per problem)."""
    use_project(inventory_file)
    inventory = load_inventory_or_fail()
    return inventory, build_plans(inventory, profile, resolve=resolve)


def build_plans(inventory: Inventory, profile: str | None, resolve: bool = True,
                overrides: dict | None = None, live: bool = False, deploying: bool = False) -> dict[str, HostPlan]:
    """Validate every host (all problems at once), then pin models on the controller.

    Pins come from the fleet file's lock (`<fleet>.lock`, written by `specfleet lock`); nothing is contacted,
    and a host needing a model or image the lock lacks is refused. `live` asks the Hub instead (commits,
    files and gated access as of now: `specfleet check --hub`).
    `overrides` (pyinfra's `--data key=value`) beat every inventory level and are validated like them.
    `deploying`: a pyinfra deploy run (then hub_mirror hosts need the token, as profile runs do)."""
    fleet = read_fleet(inventory, overrides)
    settings, problems = build_fleet(fleet, profile, deploying=deploying)
    if problems:
        raise PlanError(grouped_lines(problems, fleet.groups))
    skips = gateway_fleet.skips(fleet, {h: s.serves for h, s in settings.items()}, profile)
    plans = {h: HostPlan(settings=s, connection=dict(fleet.hosts[h].connection), is_mirror=h in fleet.mirrors,
                         is_gateway=h in fleet.gateways, skip=skips[h])
             for h, s in settings.items()}
    _link(plans, fleet)
    if resolve and profile is not None:
        _pin(plans, settings, fleet.path, live)
        _image_budget(plans, fleet.path)
    return plans


def _image_budget(plans: dict[str, HostPlan], fleet_file: Path | None) -> None:
    """The image store's budget against the pinned images this run's Sparks pull through the mirror (the lock's
    sizes): refused when it cannot hold them; a note on the mirror's plan when the lock records no sizes."""
    mirror = next((p for p in plans.values() if p.is_mirror and p.settings.image_mirror), None)
    images = {ref: p.image_platforms for p in plans.values()
              if (ref := p.image_upstream) and p.settings.image_registry and not p.is_mirror and p.settings.profile
              and not p.skip}
    if mirror is None or not images or fleet_file is None:
        return
    line = budget_problem(mirror.settings.host, mirror.settings.image_store_budget_gb, images,
                          shown(lock_path(fleet_file)))
    if line and not line.startswith("note: "):
        raise PlanError([line])
    mirror.notes = [line] if line else []


def _link(plans: dict[str, HostPlan], fleet: Fleet) -> None:
    """What a plan knows of the others: a pair's head its worker's plan, every host the (first) Hub mirror."""
    for plan in plans.values():  # a pair serves one release, the head's: its id covers the worker's
        peer = plan.settings.pair_peer
        if plan.settings.pair_role == "head" and peer is not None and plans[peer].settings.profile:
            plan.pair_worker = plans[peer]
    first = fleet.mirror
    if first is not None:
        url = advertised_url(plans[first].settings, plans[first].connection)
        login = plans[first].settings.ngc_api_key is not None
        for plan in plans.values():
            plan.mirror_url, plan.mirror_name, plan.hub_upstream = url, first, plans[first].settings.hub_endpoint
            plan.mirror_ngc_login = login


def _pin(plans: dict[str, HostPlan], settings: dict[str, Settings], fleet_file: Path | None, live: bool) -> None:
    """Each plan's model pins, image digest and image sizes: from the fleet file's lock, or (`live`) from the Hub."""
    if live:
        pins, problems = resolve_pins(settings)
        if problems:
            raise PlanError(_dedupe(problems))
        digests: dict[str, str | None] = {}
        platforms: dict[str, dict[str, dict] | None] = {}
    else:
        if fleet_file is None:
            raise PlanError(["no fleet file, so no lock file to read model pins from"])
        pins, digests, platforms, lines = pins_from_lock(settings, Path(fleet_file))
        if lines:
            raise PlanError(list(dict.fromkeys(lines)))
    for host, plan in plans.items():
        plan.pins = pins[host]
        plan.image_digest = digests.get(host)
        plan.image_platforms = platforms.get(host)
        if plan.image_digest:  # pulled by digest and run by a tag made of it: a moved tag upstream changes no host
            plan.image_upstream = pinned_image(plan.settings.image, plan.image_digest)
            plan.settings = plan.settings.model_copy(
                update={"image": local_image(plan.settings.image, plan.image_digest)})


def local_image(image: str, digest: str) -> str:
    """`registry/name:tag` + `sha256:<hex>` -> `registry/name:sha256-<hex>`: the tag the unit runs, made on the host
    from the pulled digest (docker refuses a digest as a tag's target, and an image pulled from the fleet's registry
    answers only to that registry's name): the same whichever registry the bytes came from."""
    return f"{pinned_image(image, digest).partition('@')[0]}:{digest.replace(':', '-')}"


def pinned_image(image: str, digest: str) -> str:
    """`registry/name:tag` + `sha256:...` -> `registry/name@sha256:...` (what docker pulls and runs)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1])] + last[-1].split(":", 1)[0]
    return f"{name}@{digest}"


def _dedupe(problems: list[Problem]) -> list[str]:
    seen: list[str] = []
    for problem in problems:
        if str(problem) not in seen:
            seen.append(str(problem))
    return seen


def profile_from_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    """The profile of the deploy file(s) named on a pyinfra command line."""
    deploys = [a for a in argv[1:] if a.endswith(".py") and Path(a).is_file() and Path(a).name != "inventory.py"]
    profiles = {deploy_profile(d) for d in deploys}
    if len(profiles) > 1:
        raise PlanError([f"{', '.join(deploys)}: deploy files with different profiles "
                         f"({', '.join(map(str, profiles))}) cannot run together"])
    return (profiles.pop() if profiles else None), deploys


def data_overrides(argv: list[str]) -> dict:
    """`--data key=value` pairs of a pyinfra command line, parsed as pyinfra parses them (true/false, ints,
    JSON, else the string). pyinfra applies them as host data AFTER this inventory is built, so specfleet
    reads them here to validate them and build the plan with them (e.g. `--data rollback_to=r-...`)."""
    out: dict = {}
    for i, arg in enumerate(argv):
        item = (argv[i + 1] if arg == "--data" and i + 1 < len(argv)
                else arg[len("--data="):] if arg.startswith("--data=") else None)
        if item is None or "=" not in item:
            continue
        key, value = item.split("=", 1)
        if value.lower() in ("true", "false"):
            out[key] = value.lower() == "true"
            continue
        try:
            out[key] = int(value)
            continue
        except ValueError:
            pass
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def pyinfra_groups(argv: list[str] | None = None, project: str | None = None) -> dict[str, list[tuple[str, dict]]]:
    """Body of inventory.py: the fleet file as pyinfra groups, each host carrying its HostPlan.

    `project`: inventory.py's own __file__ (its directory is the project). On bad input prints one line
    per problem and exits 2 before pyinfra connects to anything.
    """
    argv = sys.argv if argv is None else argv
    if project:
        use_project(project)
    try:
        profile, deploys = profile_from_argv(argv)
        inventory = load_inventory_or_fail()
        plans = build_plans(inventory, profile, resolve=bool(deploys), overrides=data_overrides(argv),
                            deploying=bool(deploys))
        problems = role_problems(plans, deploys)
        if problems:
            raise PlanError(problems)
    except (PlanError, ProfileError) as exc:
        for line in exc.lines:
            print(f"specfleet: {line}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID) from None
    data = {h: {**plans[h].connection, "specfleet": plans[h]} for h in inventory.hosts}
    return {group: [(h, data[h]) for h in hosts] for group, hosts in inventory.groups.items()}
