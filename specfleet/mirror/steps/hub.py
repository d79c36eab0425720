"""The fleet's Hub mirror: set up olah on hub_mirror hosts, and warm it before the other hosts stage.

`mirror_setup` (deploys/hub_mirror.py, and the converge of a hub_mirror host): preflight (Python >= 3.10, disk),
service user, directories, olah pinned in its own virtualenv, config + units, service and filtering socket
running, olah answering; then the image registry (steps/registry.py) where image_mirror is on. Every decision comes
from one status read (MirrorStatus); a converged mirror is only read.

`mirror_warm` is ONE operation at ONE place in the converge/stage, shared by every host of the run (pyinfra
orders operations by where they are called, and runs each on all its hosts before the next): on the mirror it
reads every needed file once through the mirror (so olah fetches it upstream once), on the other hosts it waits
for that and refuses to stage when the warm-up failed. The other hosts' model fetches come after it.
"""

from __future__ import annotations

import hashlib
import shlex
from urllib.parse import urlsplit

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.context import ctx_state
from pyinfra.operations import python, server

from ...constants import DPKG_LOCK_TIMEOUT_SEC, GB
from ...fleet.grammars import pinned_version
from ...fleet.programs import program_text
from ...fleet.status import sha256
from ...fleet.steps.changes import changes
from ...fleet.steps.coordination import SharedOperation, Slot
from ...fleet.steps.jobs import _follow, _say, write_root_file
from ...fleet.steps.state import STATUS_READS, current_plan, host_status, missing, refuse
from ...host.layout import HOST_PROGRAMS, HOST_TOOL, MODULES, MirrorLayout, program_mode
from ...serving.render import token_file_text
from ...serving.status import blob_path
from ...serving.steps.token import _write_token
from ..render import NAME, USER, advertised_url, mirror_files, registry_files
from ..status import WARM, MirrorState, MirrorStatus
from .images import image_warm
from .ready import mirror_succeeded, wait_answers
from .registry import registry_dirs, registry_lines, registry_problems, registry_setup

# The host tool and the modules it imports from its own directory (host/layout.py): the warm-up runs as a host job.
HOST_FILES = {name: program_text(HOST_PROGRAMS[name]) for name in (HOST_TOOL, *MODULES)}
_MIRROR_STATUS: Slot[dict[str, MirrorState]] = Slot("mirror status reads", dict)  # mirror host name -> its status
# the warm-up: the mirror hosts that added it, and each one's (ok, advertised URL)
_WARM_UP: Slot[SharedOperation[tuple[bool, str]]] = Slot("mirror warm-up", SharedOperation)
_FALLBACK: Slot[dict[str, str]] = Slot("hub fallbacks", dict)  # host name -> the upstream Hub it fetches from instead


def host_files(plan) -> dict[str, tuple[str, str]]:
    """Path in <data_dir>/bin -> (content, mode) of the host tool and its modules, as the mirror host gets them."""
    return {f"{plan.paths.bin}/{name}": (text, program_mode(name))
            for name, text in HOST_FILES.items()}


def mirror_status(plan):
    per_run = _MIRROR_STATUS()
    if host.name not in per_run:
        s, p = plan.settings, MirrorLayout(plan.settings.mirror_cache_dir)
        files = (*mirror_files(s, plan.connection), *host_files(plan), plan.paths.token_file,
                 *registry_files(s), p.reader_config, p.writer_config, *p.registry_units, plan.paths.ngc_auth_file)
        dirs = (p.cache_dir, p.repos, p.logs, s.data_dir, plan.paths.bin, s.secrets_dir, *registry_dirs(plan))
        per_run[host.name] = host.get_fact(MirrorStatus, cache_dir=s.mirror_cache_dir, python=s.mirror_python,
                                           files=tuple(dict.fromkeys(files)), dirs=dirs, store=s.image_store_dir)
    return per_run[host.name]


def fleet_bytes(state) -> int:
    """Bytes of every distinct file the run's other hosts need (their pins), for the mirror's disk preflight."""
    seen: dict[tuple[str, str, str], int] = {}
    for other in state.inventory:
        plan = other.data.get("specfleet")
        if plan is None or plan.is_mirror:
            continue
        for pin in plan.pins.values():
            for name, size in pin.files:
                seen[(pin.repo, pin.commit, name)] = size
    return sum(seen.values())


def problems_of(plan, st, need_bytes: int) -> list[str]:
    s = plan.settings
    problems = []
    if not st.python:
        problems.append(f"{s.mirror_python} not found (mirror_python; olah needs Python >= 3.10)")
    elif tuple(int(x) for x in st.python.split(".")) < (3, 10):
        problems.append(f"{s.mirror_python} is Python {st.python}; olah needs >= 3.10 (set mirror_python)")
    missing = max(0, need_bytes - st.cached_bytes)
    if need_bytes and st.free_bytes < missing + s.disk_headroom_gb * GB:
        problems.append(f"not enough disk under {s.mirror_cache_dir}: {missing / GB:.1f} GB of the fleet's models not "
                        f"yet cached + {s.disk_headroom_gb} GB headroom (disk_headroom_gb), "
                        f"{st.free_bytes / GB:.1f} GB free")
    return problems


@deploy("Hub mirror")
def mirror_setup():
    plan = current_plan()
    if not plan.is_mirror:
        return
    s, p = plan.settings, MirrorLayout(plan.settings.mirror_cache_dir)
    st = mirror_status(plan)
    url = advertised_url(s, plan.connection)
    logger.info(f"    [{host.name}] hub mirror {url} (upstream {s.hub_endpoint}): olah {st.olah or 'not installed'}, "
                f"service {st.service or '-'}, {st.cached_bytes / GB:.2f} GB cached, {st.free_bytes / GB:.1f} GB free")
    problems = problems_of(plan, st, fleet_bytes(ctx_state.get())) + registry_problems(plan, st)
    if problems:
        refuse(name="Hub mirror preflight", message=f"{host.name}: hub mirror preflight: " + "; ".join(problems))
        return
    _user_and_directories(plan, st, p)
    _token(plan, st)
    _host_tool(plan, st)
    installed = _olah(plan, st, p)
    _files_and_service(plan, st, p, installed)
    registry_setup(plan, st)


@deploy("Hub mirror plan (read only)")
def mirror_plan(out: dict):
    """What deploys/hub_mirror.py would do here (`specfleet plan`), from the status read its setup makes: olah's
    install and start, and the image registry's steps (steps/registry.py)."""
    plan = current_plan()
    s, st = plan.settings, mirror_status(plan)
    lines = [f"refused: {p}" for p in problems_of(plan, st, 0) + registry_problems(plan, st)]
    if not lines:
        pinned = pinned_version(s.mirror_requirement, "olah")
        if pinned is None or st.olah != pinned:
            lines.append(f"install {s.mirror_requirement} in {MirrorLayout(s.mirror_cache_dir).venv}")
        changed = [path for path, text in mirror_files(s, plan.connection).items() if st.sha.get(path) != sha256(text)]
        lines += [f"write {path}" for path in changed]
        if lines or st.service != "active" or st.socket != "active":
            lines.append(f"start {NAME} (olah) and its filtering socket")
        lines += registry_lines(plan, st)
    out[host.name] = lines


def _user_and_directories(plan, st, p: MirrorLayout) -> None:
    s = plan.settings
    if not st.user:
        server.shell(name=f"Mirror service user {USER}",
                     commands=[f"useradd --system --no-create-home --home-dir {shlex.quote(p.cache_dir)} "
                               f"--shell /usr/sbin/nologin {USER}"])
    wanted_dirs = {p.cache_dir: "755|root|root", p.repos: f"750|{USER}|{USER}", p.logs: f"750|{USER}|{USER}",
                   s.data_dir: "755|root|root", plan.paths.bin: "755|root|root", s.secrets_dir: "700|root|root"}
    for path, want in wanted_dirs.items():
        if st.dirs.get(path) != want:
            mode, user, group = want.split("|")
            server.shell(name=f"Directory {path}",
                         commands=[f"install -d -m {mode} -o {user} -g {group} {shlex.quote(path)}"])


def _token(plan, st) -> None:
    """The token: the warm-up reads gated repos with it (olah checks each Spark's own token with the Hub per
    request)."""
    s, token_file = plan.settings, plan.paths.token_file
    if s.hf_token is not None:
        if st.sha.get(token_file) != sha256(token_file_text(s.hf_token.get_secret_value())):
            python.call(name="Hugging Face token (root:root 0600, written from stdin)", function=_write_token,
                        path=token_file, token=s.hf_token.get_secret_value())
    elif token_file in st.sha:
        server.shell(name="Remove the Hugging Face token (no token in the inventory)",
                     commands=[f"rm -f {shlex.quote(token_file)}"])


def _host_tool(plan, st) -> None:
    """The host tool and the modules it imports: the warm-up runs as a host job (detached from SSH, attachable, one
    at a time)."""
    for path, (content, mode) in host_files(plan).items():
        if st.sha.get(path) != sha256(content):
            python.call(name=f"Install {path}", function=write_root_file, path=path, content=content, mode=mode)


def _olah(plan, st, p: MirrorLayout) -> bool:
    """olah, pinned, in its own virtualenv; whether it is (re)installed in this run."""
    s = plan.settings
    pinned = pinned_version(s.mirror_requirement, "olah")
    if pinned is not None and st.olah == pinned:
        return False
    if not st.venv_module:
        server.shell(name="python3-venv for the mirror's virtualenv (waits up to "
                          f"{DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock)",
                     commands=["DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                               f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC} python3-venv"])
    index = f" --index-url {shlex.quote(s.pip_index_url)}" if s.pip_index_url else ""
    if s.pip_index_url and s.pip_index_url.startswith("http://"):  # pip ignores a plain-HTTP index unless trusted
        index += f" --trusted-host {shlex.quote(urlsplit(s.pip_index_url).netloc)}"
    server.shell(name=f"{s.mirror_requirement} in the mirror's virtualenv {p.venv}",
                 commands=[f"{shlex.quote(s.mirror_python)} -m venv {shlex.quote(p.venv)}",
                           f"{shlex.quote(p.pip)} install -q --disable-pip-version-check{index} "
                           f"{shlex.quote(s.mirror_requirement)}"])
    return True


def _files_and_service(plan, st, p: MirrorLayout, installed: bool) -> None:
    """olah's config and the units written where they differ; the service and its socket (re)started as needed."""
    s = plan.settings
    changed = []
    for path, content in mirror_files(s, plan.connection).items():
        if st.sha.get(path) != sha256(content):
            changed.append(path)
            python.call(name=f"Write {path}", function=write_root_file, path=path, content=content, mode="644")
    if set(changed) & set(p.units):
        server.shell(name="systemd daemon-reload (mirror units changed)", commands=["systemctl daemon-reload"])
    if not (changed or installed or st.service != "active" or st.socket != "active"
            or st.enabled != ("enabled", "enabled")):
        return
    restart = changed or installed
    server.shell(name=f"Start {NAME} (olah) and its filtering socket",
                 commands=[f"systemctl enable {p.service_unit} {p.socket_unit}",
                           f"systemctl {'restart' if restart else 'start'} {p.service_unit}",
                           # a changed socket (port, bind, allowed networks) takes effect only when re-created
                           f"systemctl stop {p.proxy_unit} {p.socket_unit}; systemctl start {p.socket_unit}"
                           if changed else f"systemctl start {p.socket_unit}"])
    python.call(name="olah answers", function=wait_answers, python=p.python,
                url=f"http://127.0.0.1:{s.mirror_engine_port}/", unit=p.service_unit, what="hub mirror: olah")


# ---- warm-up: the shared operation ---------------------------------------------------------------------------
def needed_files(state) -> list[tuple[str, str, str, int]]:
    """(repo, commit, file, size) that some non-mirror host of this run still has to fetch, from the status each
    of them read (the same decision its models step makes); each file once."""
    statuses = STATUS_READS(state)
    out: dict[tuple[str, str, str], int] = {}
    for other in state.inventory:
        plan = other.data.get("specfleet")
        if plan is None or plan.is_mirror or other.name not in statuses:
            continue
        for role, pin in plan.pins.items():
            st = statuses[other.name]
            todo = {path for path, _ in missing(plan, st, role)}
            snap = plan.paths.snapshot(pin.repo, pin.commit)
            blobs = pin.blobs if len(pin.blobs) == len(pin.files) else (None,) * len(pin.files)
            for (name, size), blob in zip(pin.files, blobs, strict=True):
                if f"{snap}/{name}" not in todo:
                    continue
                if blob and st.files.sizes.get(blob_path(plan, pin, blob)) == size:
                    continue  # its content is in the host's cache already (an unchanged file of a new commit)
                out[(pin.repo, pin.commit, name)] = size
    return [(repo, commit, name, size) for (repo, commit, name), size in sorted(out.items())]


def _warm_or_wait(state, host) -> bool:
    plan = host.data.get("specfleet")
    warm = _WARM_UP(state)
    if plan.is_mirror:
        s = plan.settings
        files = needed_files(state)
        url = advertised_url(s, plan.connection)
        if not files:
            warm.publish(host, (True, url))
            return True
        token = plan.paths.token_file if s.hf_token is not None else "-"  # a path; the token itself stays in its file
        argv = [MirrorLayout(s.mirror_cache_dir).python, "-c", WARM, f"http://127.0.0.1:{s.mirror_engine_port}", token]
        for repo, commit, name, size in files:
            argv += [repo, commit, name, str(size)]
        key = "warm:" + hashlib.sha256("\n".join(argv[3:]).encode()).hexdigest()[:16]
        _say(host, f"hub mirror: warming {len(files)} file(s), {sum(f[3] for f in files) / 1e6:.1f} MB, "
                   f"through {url} (one upstream fetch each)")
        ok = _follow(state, host, key, argv, {})
        warm.publish(host, (ok, url))
        return ok
    if plan.mirror_down:  # `specfleet rollout`: the mirror failed its warm-up phase
        return _mirror_unusable(state, host, plan)
    # in a CLI run the warm-up and this wait are ONE operation, running now on the mirror (fleet/steps/coordination.py)
    return mirror_succeeded(warm, state, host, plan) or _mirror_unusable(state, host, plan)


def _mirror_unusable(state, host, plan) -> bool:
    """The host's mirror is down or failed to warm: with hub_fallback it fetches from the mirror's upstream Hub
    (a warning); without, it refuses to stage (and keeps serving what it serves)."""
    s = plan.settings
    if s.hub_fallback and plan.hub_upstream:
        _FALLBACK(state)[host.name] = plan.hub_upstream
        logger.warning(f"{host.print_prefix}hub mirror {plan.mirror_name} ({plan.mirror_url}) is down or failed to "
                       f"warm; hub_fallback: fetching from the Hub directly ({plan.hub_upstream})")
        return True
    _say(host, f"hub mirror {plan.mirror_name} ({plan.mirror_url}) failed to warm; not staging from it (hub_endpoint "
               f"{s.hub_endpoint}; hub_fallback: true would fetch from {plan.hub_upstream} instead); this host keeps "
               "serving its current release", error=True)
    return False


def fetch_endpoint(state, host, plan) -> str:
    """Where the host's model fetches go: its hub_endpoint, or the upstream Hub when it fell back (hub_fallback)."""
    return _FALLBACK(state).get(host.name, plan.settings.hub_endpoint)


def mirror_warm() -> None:
    """The shared warm-up operation (see the module docstring). Added on the mirror hosts and on every host that
    downloads from the mirror (hub_endpoint = the mirror's URL) and has models to fetch."""
    plan = current_plan()
    if not plan.uses_mirror or plan.settings.profile is None:
        return
    if not plan.is_mirror and not changes(plan).fetches:
        return
    python.call(name="Hub mirror: warm it with the files the fleet needs (the other hosts stage from it afterwards)",
                function=_warm_or_wait)
    if plan.is_mirror:
        _WARM_UP().added(host)


@deploy("Hub mirror warm-up")
def warm_phase():
    """`specfleet rollout`'s phase before it stages: the mirror set up and warmed with what the hosts that download
    from it still need (each of them only reads its status here)."""
    plan = current_plan()
    if plan.is_mirror:
        mirror_setup()
        mirror_warm()
        image_warm()
    else:
        host_status(plan)
