"""Shared by the packaged deploys: the host's plan and status, and an operation that refuses."""

from __future__ import annotations

import hashlib
import re
import shlex
import weakref
from dataclasses import dataclass
from importlib import resources
from weakref import WeakKeyDictionary

from pyinfra import host
from pyinfra.api import operation
from pyinfra.context import ctx_state

from ..facts import HostStatus, SpecfleetHost
from ..plan import HostPlan
from ..settings import TIKTOKEN_FILES
from ..validate_in_image import config_key, image_key


def current_plan() -> HostPlan:
    plan = host.data.get("specfleet")
    if not isinstance(plan, HostPlan):
        raise SystemExit(f"specfleet: {host.name}: no specfleet plan in host data; run with specfleet's inventory.py "
                         "(pyinfra inventory.py deploys/<name>.py)")
    return plan


def model_paths(plan: HostPlan) -> dict[str, list[tuple[str, int]]]:
    """Per pin role: the (host path, expected size) of every file the server needs (snapshot + draft dir)."""
    p = plan.paths
    out: dict[str, list[tuple[str, int]]] = {}
    for role, pin in plan.pins.items():
        paths = [(f"{p.snapshot(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        if role == "draft":
            paths += [(f"{p.draft_dir(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        out[role] = paths
    return out


def blob_path(plan: HostPlan, pin, blob: str) -> str:
    """Where the Hugging Face cache keeps a file's content (snapshots link to it): blobs/<etag>."""
    return f"{plan.paths.repo_dir(pin.repo)}/blobs/{blob}"


_STATUS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {host name: HostStatus}


def host_status(plan: HostPlan) -> HostStatus:
    """The host's status before this run changed anything (read once per host per run)."""
    per_run = _STATUS.setdefault(ctx_state.get(), {})
    if host.name not in per_run:
        per_run[host.name] = _read_status(plan)
    return per_run[host.name]


@dataclass(frozen=True)
class Want:
    """What a managed path must be: a dir/file with mode and owner (and content), or a symlink."""

    kind: str  # "dir" | "file" | "link"
    mode: str = "755"
    user: str = "root"
    group: str = "root"
    sha256: str | None = None  # files: expected content hash (None: only existence, mode, owner)
    target: str | None = None  # links

    def matches(self, found: tuple[str, ...] | None) -> bool:
        if not found or found[0] != self.kind:
            return False
        if self.kind == "link":
            return found[1] == self.target
        if tuple(found[1:4]) != (self.mode, self.user, self.group):
            return False
        if self.sha256 is None:
            # content not known in advance (release.json records its creation time): it must at least not be
            # empty, as a file is after a power loss right after it was written
            return self.kind != "file" or (len(found) > 4 and found[4] != EMPTY_SHA256)
        return found[4] == self.sha256


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def sha256(content: bytes | str) -> str:
    return hashlib.sha256(content.encode() if isinstance(content, str) else content).hexdigest()


def wanted_files(plan: HostPlan) -> dict[str, Want]:
    """Every small file/dir/link a converge manages, with what it must be (one status read covers all)."""
    cached = _WANTED.get(id(plan))
    if cached is None or cached[0] is not plan.settings or cached[1] is not plan.pins:
        cached = _WANTED[id(plan)] = (plan.settings, plan.pins, _wanted_files(plan))
        weakref.finalize(plan, _WANTED.pop, id(plan), None)
    return cached[2]


_WANTED: dict[int, tuple] = {}  # id(HostPlan) -> (settings, pins, wanted files) while the plan lives


def _wanted_files(plan: HostPlan) -> dict[str, Want]:
    s, p = plan.settings, plan.paths
    host_dir = resources.files("specfleet.host")
    want: dict[str, Want] = {
        s.secrets_dir: Want("dir", "700"),
        s.data_dir: Want("dir"),
        p.bin: Want("dir"),
        p.host_tool: Want("file", "755", sha256=sha256((host_dir / "specfleet_host.py").read_bytes())),
        p.fetch_tool: Want("file", "755", sha256=sha256((host_dir / "fetch_model.py").read_bytes())),
    }
    if s.hf_token is not None:
        want[p.token_file] = Want("file", "600", sha256=sha256(s.hf_token.get_secret_value() + "\n"))
    if s.profile is None:
        return want
    if s.profile["tiktoken"]:
        want[p.tiktoken] = Want("dir")
        for name in TIKTOKEN_FILES:
            want[f"{p.tiktoken}/{name}"] = Want("file", "644", sha256=s.tiktoken_sha256[name])
    rdir = f"{p.releases}/{plan.release_id}"
    want[p.releases] = Want("dir")
    want[rdir] = Want("dir")
    for path, content in plan.files().items():
        if path.startswith(p.current + "/"):
            want[f"{rdir}/{path.rsplit('/', 1)[1]}"] = Want("file", "644", sha256=sha256(content))
    if "draft" in plan.pins:
        pin = plan.pins["draft"]
        want[f"{rdir}/draft"] = Want("link", target=p.draft_dir(pin.repo, pin.commit))
    want[f"{rdir}/release.json"] = Want("file", "644")  # written once: it records the creation time
    return want


def _read_status(plan: HostPlan) -> HostStatus:
    s = plan.settings
    sizes = tuple(path for paths in model_paths(plan).values() for path, _ in paths)
    if plan.mirror_url is not None:  # the mirror warms only what no host has: blobs a new commit shares are not fetched
        sizes += tuple(blob_path(plan, pin, blob) for pin in plan.pins.values() for blob in pin.blobs)
    files = tuple(wanted_files(plan)) + (() if s.hf_token is not None else (plan.paths.token_file,))
    return host.get_fact(SpecfleetHost, data_dir=s.data_dir, service=s.service_name, port=s.serve_port,
                         image=s.image, sizes=sizes, files=files, users=tuple(s.operator_users),
                         config_key=config_key(plan.rendered.config) if s.profile is not None else "")


def needs_validation(plan: HostPlan) -> bool:
    """Whether the release step must validate the config in the image (validate_in_image): no cached OK verdict for
    (config hash, image id) in the one status read. An image still to pull has no id yet: validated after the pull."""
    s, st = plan.settings, host_status(plan)
    if s.profile is None:
        return False
    return not st.image_id or f"{config_key(plan.rendered.config)}-{image_key(st.image_id)}" not in st.validated


def differs(plan: HostPlan, path: str) -> bool:
    """Whether `path` is not yet what the converge wants (decided from the one status read)."""
    return not wanted_files(plan)[path].matches(host_status(plan).files.get(path))


def missing(plan: HostPlan, status: HostStatus, role: str) -> list[tuple[str, int]]:
    return [(path, size) for path, size in model_paths(plan)[role] if status.sizes.get(path, -1) != size]


@operation(is_idempotent=False)
def refuse(message: str):
    """Fail this host with one line (used by read-only checks; nothing has changed on the host)."""
    yield f"echo {shlex.quote(message)} >&2; exit 1"


def hub_client_ok(plan: HostPlan) -> bool:
    """Whether the fetch virtualenv already holds exactly the pinned huggingface_hub."""
    pinned = re.fullmatch(r"huggingface_hub\s*==\s*([\w.]+)", plan.settings.hub_client_requirement)
    return bool(pinned) and host_status(plan).hub_client == pinned.group(1)


@dataclass
class Fetch:
    role: str
    repo: str
    commit: str
    files: int  # files to download into the snapshot
    bytes: int
    links: int  # draft hard links to (re)make (no download)


@dataclass
class Changes:
    """What a converge would do on the host, decided from the one status read (the steps decide the same way)."""

    current: str
    release: str | None  # the plan's release (None: profile-less deploy)
    switch: list[tuple[str, str]]  # (kind, why) from service.switch_checks
    fetches: list[Fetch]
    pull: str | None  # image to pull
    token: str | None  # "write" / "remove"
    users: list[str]  # added to the docker group
    install: str | None  # hub client requirement to install
    writes: list[str]  # other managed files/dirs/links (tools, encodings, release files) to write
    validate: str | None = None  # image whose own TensorRT-LLM validates the config (no cached verdict)

    @property
    def restart(self) -> list[str]:
        from .service import RESTARTS
        return [why for kind, why in self.switch if kind in RESTARTS]

    @property
    def unit_rewrite(self) -> bool:
        return any(kind == "unit" for kind, _ in self.switch)

    def lines(self) -> list[str]:
        out = [f"write {path}" for path in self.writes]
        if self.token:
            out.append(f"{self.token} the Hugging Face token file")
        out += [f"add {u} to the docker group" for u in self.users]
        if self.validate:
            out.append(f"validate the config with {self.validate}'s own TensorRT-LLM (no cached verdict)")
        if self.install:
            out.append(f"install {self.install}")
        if self.pull:
            out.append(f"pull {self.pull}")
        for f in self.fetches:
            out.append(f"fetch {f.role} {f.repo}@{f.commit[:12]}: {f.files} file(s), {f.bytes:,} bytes"
                       + (f", {f.links} draft link(s)" if f.links else ""))
        out += [why for _, why in self.switch]
        return out


def changes(plan: HostPlan) -> Changes:
    from .service import switch_checks

    s, st, p = plan.settings, host_status(plan), plan.paths
    token = None
    if s.hf_token is None and p.token_file in st.files:
        token = "remove"
    elif s.hf_token is not None and differs(plan, p.token_file):
        token = "write"
    writes = [path for path in wanted_files(plan) if path != p.token_file and differs(plan, path)]
    users = [u for u in s.operator_users if st.groups.get(u) and "docker" not in st.groups[u]]
    fetches: list[Fetch] = []
    switch: list[tuple[str, str]] = []
    pull = None
    if s.profile is not None:
        pull = None if st.image_id else s.image
        for role, pin in plan.pins.items():
            todo = missing(plan, st, role)
            if todo:
                snap = [(path, size) for path, size in todo if "/snapshots/" in path]
                fetches.append(Fetch(role, pin.repo, pin.commit, len(snap), sum(size for _, size in snap), len(todo) - len(snap)))
        switch = switch_checks(plan)
    return Changes(current=st.current, release=plan.release_id if s.profile is not None else None, switch=switch,
                   fetches=fetches, pull=pull, token=token, users=users,
                   install=None if hub_client_ok(plan) else s.hub_client_requirement, writes=writes,
                   validate=s.image if needs_validation(plan) else None)


def pending(plan: HostPlan) -> list[str]:
    """What a converge would change on the host, from the one status read (empty: nothing to do).

    Decides whether a converge takes the host's run lock; `specfleet plan` prints it (via `changes`)."""
    return changes(plan).lines()
