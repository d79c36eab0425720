"""Run whole specfleet deploys against pyinfra's @fake connector (no host, no network).

`fake_converged_responses(plan)` scripts what a fully converged host answers to every fact the
converge reads; tests then change one answer to simulate one difference.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyinfra
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all, disconnect_all
from pyinfra.api.deploy import add_deploy
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.operations import run_ops
from pyinfra.api.state import StateStage
from pyinfra.context import ctx_host, ctx_state

from specfleet.fleet.inventory import Inventory as FleetInventory
from specfleet.fleet.inventory import load_inventory
from specfleet.fleet.model import read_fleet
from specfleet.fleet.programs import program
from specfleet.fleet.settings import build_fleet
from specfleet.host.layout import EARLYOOM_BIN, HOST_PROGRAMS, MODULES
from specfleet.memory.render import DOCKERD_OOM_SCORE_ADJ
from specfleet.pins.lock_images import image_digests
from specfleet.pins.lockfile import Lock, LockedModel, lock_path, profiles_to_lock, write_lock
from specfleet.pins.models import ModelPin, models_of
from specfleet.plan import HostPlan, build_plans
from specfleet.serving.render import config_yaml, unit_text
from specfleet.serving.validate import verdict_name

COMMITS = {"target": "a" * 40, "draft": "b" * 40}
FILES = (("config.json", 100, "c" * 40), ("model-00001-of-00002.safetensors", 2000, "d" * 64),
         ("model-00002-of-00002.safetensors", 3000, "e" * 64))  # (name, size, blob)


def fake_pins(plan: HostPlan) -> dict[str, ModelPin]:
    s = plan.settings
    pins = {}
    for role in ("target", "draft"):
        model = s.profile.get(role)
        if model:
            pins[role] = ModelPin(role, model["repo"], "main", COMMITS[role], tuple((n, sz) for n, sz, _ in FILES),
                                  tuple(model["ignore_patterns"]), 10_000, tuple(b for _, _, b in FILES))
    return pins


def write_fake_lock(fleet_path: Path, commits: dict[str, str] | None = None) -> Path:
    """The lock `specfleet lock` would write for this fleet file, with fake_pins' commits and files (no Hub)."""
    parsed = read_fleet(load_inventory(fleet_path))
    lock = Lock()
    for profile in profiles_to_lock(parsed):
        fleet, _ = build_fleet(parsed, profile)
        for s in fleet.values():
            for role, model, revision, _ in models_of(s):
                lock.models[(model["repo"], revision)] = LockedModel((commits or COMMITS)[role],
                                                                     tuple(model["ignore_patterns"]), FILES, 10_000)
            lock.images[s.image] = {"image_digest": None, "note": "not pinned: unit test"}
    write_lock(lock_path(fleet_path), lock, fleet_path.name)
    return lock_path(fleet_path)


def make_plans(host_vars: dict[str, dict[str, Any]], profile: str | None,
               groups: dict[str, list[str]] | None = None) -> dict[str, HostPlan]:
    inv = FleetInventory(path=None, hosts=list(host_vars), groups={"all": list(host_vars), **(groups or {})},
                         host_vars=host_vars)
    plans = build_plans(inv, profile, resolve=False)
    for plan in plans.values():
        if plan.settings.profile:
            plan.pins = fake_pins(plan)
    return plans


def status_command(data_dir: str, service: str = "specfleet-test-nonexistent", **env: str) -> str:
    """The one status read's command (facts.SpecfleetHost) for a host with `data_dir` and no profile, run locally or
    over ssh by a test; `env` overrides the variables the parts compose (SIZES, FILES, LINKS, ...)."""
    from specfleet.fleet.status import SpecfleetHost, status_env
    from specfleet.fleet.steps.state import wanted_files
    plan = make_plans({"local": {"data_dir": data_dir, "service_name": service, "hf_token_required": False}},
                      None)["local"]
    composed = dict(status_env(plan, wanted_files(plan)))
    return SpecfleetHost().command(tuple({**composed, **env}.items()))


def release_state_line(**state: Any) -> str:
    """The probe's `release_state` line: release_state.read()'s JSON (fields left out read as on a fresh host)."""
    blank = {"current": None, "previous": None, "releases": [], "record": {}, "gate": {}, "lock": None, "job": None}
    return f"release_state\t{json.dumps({**blank, **state})}"


def status_lines(plan: HostPlan, **over: Any) -> list[str]:
    """What SpecfleetHost prints for a converged host (override any field by keyword)."""
    s, p = plan.settings, plan.paths
    unit_sha = hashlib.sha256(unit_text(s).encode()).hexdigest() if s.profile else ""
    fields = {
        "arch": "aarch64", "os": "Ubuntu 24.04.3 LTS", "docker": "ok",
        "runtimes": '{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}',
        "listen": "1", "active": "active", "enabled": "enabled",
        "current": plan.release_id if s.profile else "", "unit_sha256": unit_sha, "container": "true",
        "free": str(500 * 10**9), "image": "sha256:" + "c" * 64, "dockerd_oom": str(DOCKERD_OOM_SCORE_ADJ),
        "earlyoom": f"{EARLYOOM_BIN}\tactive\tenabled",  # installed, running with its drop-in (memory/steps.py)
        "cap_bnd": "000001ffffffffff",  # a Spark's root: every capability, CAP_SYS_RESOURCE (24) among them
    }
    fields.update({k: str(v) for k, v in over.items() if k in fields})
    lines = [f"{k}\t{v}" for k, v in fields.items() if k != "image"]
    lines.append(image_line(plan, fields["image"], over.get("repo_digests")))
    from specfleet.serving.status import model_paths
    sizes = over.get("sizes", {})
    for paths in model_paths(plan).values():
        for path, size in paths:
            lines.append(f"size\t{sizes.get(path, size)}\t{path}")
    from specfleet.fleet.steps.state import wanted_files
    missing = set(over.get("files_missing", ()))
    if over.get("release_missing"):
        missing |= {path for path in wanted_files(plan) if path.startswith(f"{p.releases}/{plan.release_id}")}
    for path, want in wanted_files(plan).items():
        if path in missing:
            continue
        desc = f"link|{want.target}" if want.kind == "link" else f"{want.kind}|{want.mode}|{want.user}|{want.group}"
        if want.kind == "file":
            desc += f"|{want.sha256 or '0' * 64}"
        lines.append(f"file\t{desc}\t{path}")
    for user in s.operator_users:
        lines.append(f"groups\t{user}\t" + ("(missing)" if user in over.get("missing_users", ()) else f"{user} docker"))
    lines.append(f"hub_client\t{over.get('hub_client', '2.4.0')}")
    # the in-image validation verdict of the plan's config with this image (a converged host has it)
    verdict = [verdict_name(config_yaml(s), fields["image"])] if s.profile and fields["image"] else []
    lines.append(f"validated\t{' '.join(over.get('validated', verdict))}")
    gate = over.get("gate", {"release": plan.release_id, "result": "passed"} if s.profile else {})
    record = plan.release_record("2025-01-01T00:00:00Z") if s.profile and fields["current"] == plan.release_id else {}
    current = fields["current"] or None
    lines.append(release_state_line(
        current=current, previous=over.get("previous"), releases=over.get("releases", [current] if current else []),
        record=over.get("current_release", record), gate=gate, lock=over.get("lock"), job=over.get("job"),
        started=over.get("started")))
    return lines


def image_line(plan: HostPlan, image_id: str, repo_digests: list[str] | None = None) -> str:
    """The probe's `image` line: the id and RepoDigests docker reports under the unit's tag (by default those of a
    converged host: pulled by the lock's digest), then the lock's digests (IMAGE_PINS)."""
    pins = " ".join(image_digests(plan.image_digest, plan.image_platforms))
    digests = repo_digests if repo_digests is not None else ([plan.image_upstream] if plan.image_upstream else [])
    return f"image\t{image_id} {json.dumps(digests)}\t{pins}" if image_id else f"image\t\t{pins}"


# A host job that starts and ends well (override per test to simulate a failing or running job).
JOB_OK = {"job start": '{"id": "j1", "state": "started"}', "job status": '{"id": "j1", "key": "k", "state": "ok", "exit": 0}'}


def run_deploy(plans: dict[str, HostPlan], deploy_fn: Callable, *args: Any,
               responses: Callable[[HostPlan], dict] | None = None, config: Config | None = None,
               cli: bool = False, serial: bool = False) -> State:
    """Run `deploy_fn` on the plans' hosts. `cli`: as `pyinfra inventory.py deploys/...` does, where operations are
    identified by where they are called (the Python API, the default, numbers each host's operations); `serial`:
    pyinfra's --serial, one host after the other."""
    hosts = []
    for name, plan in plans.items():
        data = {**plan.connection, "specfleet": plan, "fake_delay": 0, "fake_delay_jitter": 0,
                "fake_responses": {**JOB_OK, **(responses(plan) if responses else {})}}
        hosts.append((f"@fake/{name}", data))
    inventory = Inventory((hosts, {}))
    state = State(inventory, config or Config())
    connect_all(state)
    if cli:
        _prepare_as_cli(state, deploy_fn, *args)
    else:
        add_deploy(state, deploy_fn, *args)
    try:
        run_ops(state, serial=serial)
    except PyinfraError as exc:  # every host failed: pyinfra's way of saying so
        if "No hosts remaining" not in str(exc):
            raise
    disconnect_all(state)
    return state


def _prepare_as_cli(state: State, deploy_fn: Callable, *args: Any) -> None:
    """What pyinfra's CLI does before it runs operations: each host's deploy code in turn, in the prepare stage,
    with operations ordered and identified by their call sites (pyinfra.api.util.get_operation_order_from_stack)."""
    state.current_op_file_number = 0
    pyinfra.is_cli = True
    try:
        state.set_stage(StateStage.Prepare)
        with ctx_state.use(state):
            for h in state.inventory.get_active_hosts():
                with ctx_host.use(h):
                    deploy_fn(*args)
        state.set_stage(StateStage.Execute)
    finally:
        pyinfra.is_cli = False


def executed(state: State) -> dict[str, list[str]]:
    return {h.name.removeprefix("@fake/"): list(h.connector.executed_commands) for h in state.inventory}


def changed_ops(state: State) -> dict[str, list[str]]:
    """Names of operations that changed something, per host."""
    out: dict[str, list[str]] = {}
    for h in state.inventory:
        names = []
        for op_hash in state.get_op_order():
            meta = state.get_op_meta(op_hash)
            result = state.ops[h].get(op_hash)
            if result and result.operation_meta.did_change():
                names.append(", ".join(meta.names))
        out[h.name.removeprefix("@fake/")] = names
    return out


SPECFLEET_FACT = re.compile(r"export DATA SVC ")


def _stat(path: str, mode: str, target: str | None = None) -> tuple[re.Pattern, str]:
    name = f"'{path}' -> '{target}'" if target else f"'{path}'"
    return (re.compile(re.escape(f"%N' {path} 2>")),
            f"user=root group=root mode={mode} atime=0 mtime=0 ctime=0 size=4096 {name}")


def _sha1(path: str, content: bytes) -> tuple[re.Pattern, str]:
    return re.compile(rf"sha1sum {re.escape(path)}( |$)"), f"{hashlib.sha1(content).hexdigest()}  {path}"


def converged_responses(plan: HostPlan, **status: Any) -> dict:
    """Fact answers of a host on which `plan` has fully converged (status fields overridable)."""

    s, p = plan.settings, plan.paths
    rdir = f"{p.releases}/{plan.release_id}"
    out: dict = {SPECFLEET_FACT: status_lines(plan, **status)}
    dirs = {s.secrets_dir: "drwx------", s.data_dir: "drwxr-xr-x", p.bin: "drwxr-xr-x", p.tiktoken: "drwxr-xr-x",
            p.releases: "drwxr-xr-x", rdir: "drwxr-xr-x"}
    for path, mode in dirs.items():
        out.__setitem__(*_stat(path, mode))
    out.__setitem__(*_stat(f"{p.venv}/bin/activate", "-rw-r--r--"))
    uploads: dict[str, tuple[bytes, str]] = {}
    if s.hf_token is not None:
        uploads[p.token_file] = ((s.hf_token.get_secret_value() + "\n").encode(), "-rw-------")
    for name, source in HOST_PROGRAMS.items():
        uploads[f"{p.bin}/{name}"] = (program(source).read_bytes(), "-rw-r--r--" if name in MODULES else "-rwxr-xr-x")
    for path, content in plan.files(redact=False).items():
        if path.startswith(p.current + "/"):
            uploads[f"{rdir}/{path.rsplit('/', 1)[1]}"] = (content.encode(), "-rw-r--r--")
    for path, (content, mode) in uploads.items():
        out.__setitem__(*_stat(path, mode))
        out.__setitem__(*_sha1(path, content))
    if "draft" in plan.pins:
        pin = plan.pins["draft"]
        out.__setitem__(*_stat(f"{rdir}/draft", "lrwxrwxrwx", p.draft_dir(pin.repo, pin.commit)))
    users = s.operator_users
    out["cat /etc/passwd | cut -d: -f1"] = [f"{u}:x:{1000 + i}:{1000 + i}::/home/{u}:/bin/bash|{u}|{u} docker||"
                                              for i, u in enumerate(users)] + ["root:x:0:0:root:/root:/bin/bash|root|root||"]
    out["cat /etc/group"] = [f"docker:x:998:{','.join(users)}", "root:x:0:"]
    out["uname -s"] = "Linux"
    out["dpkg -l"] = ["ii  python3-venv    3.11.2-1+b1    amd64    venv module for python3"]
    out["pip freeze"] = ["huggingface_hub==2.4.0", "pip==23.0.1"]
    return out


def fake_run_on(monkeypatch, responses: Callable[[HostPlan], dict], unreachable: tuple[str, ...] = ()) -> None:
    """The CLI's read-only runs (fleet/run.run_on) on @fake hosts answering `responses`: a command's deploy puts each
    host's result in the dict it passes, under the host's name. The hosts named in `unreachable` go to the real
    run_on instead, over SSH to where their fleet file entry points (a port nothing listens on: SSH fails to
    connect, as to a host that is down)."""
    from specfleet.fleet import run as runner

    real = runner.run_on

    def run_on(plans, hosts, fn, *args):
        down = real(plans, [h for h in hosts if h in unreachable], fn, *args)
        fake = {h: plans[h] for h in hosts if h not in unreachable}
        failed = {h.name.removeprefix("@fake/") for h in run_deploy(fake, fn, *args, responses=responses).failed_hosts
                  } if fake else set()
        found = args[0]
        for key in [k for k in found if k.startswith("@fake/")]:
            found[key.removeprefix("@fake/")] = found.pop(key)
        return down | failed
    monkeypatch.setattr(runner, "run_on", run_on)
