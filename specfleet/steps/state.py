"""The current host's state, as the steps see it: its plan, its one status read (host_status), what must be on it
(wanted_files) and whether a path differs, the model files it lacks, and an operation that refuses."""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from importlib import resources

from pyinfra import host
from pyinfra.api import Host, operation
from pyinfra.context import ctx_state

from ..facts import HostStatus, SpecfleetHost
from ..gateway_files import spark_files, spark_paths
from ..grammars import pinned_version
from ..host.layout import DRAFT_LINK, HOST_PROGRAMS, RECORD_FILE, program_mode
from ..memory import earlyoom_floor_gb
from ..pair_files import pair_reads
from ..plan import HostPlan
from ..render import dockerd_oom_dropin, earlyoom_dropin, token_text
from ..settings import TIKTOKEN_FILES
from ..validate_in_image import config_key, image_key
from .coordination import Slot


def current_plan() -> HostPlan:
    plan = host.data.get("specfleet")
    if not isinstance(plan, HostPlan):
        raise SystemExit(f"specfleet: {host.name}: no specfleet plan in host data; run with specfleet's inventory.py "
                         "(pyinfra inventory.py deploys/<name>.py)")
    return plan


def model_paths(plan: HostPlan) -> dict[str, list[tuple[str, int]]]:
    """Per pin role: the (host path, expected size) of every file the server needs (snapshot + draft dir)."""
    layout = plan.paths
    out: dict[str, list[tuple[str, int]]] = {}
    for role, pin in plan.pins.items():
        paths = [(f"{layout.snapshot(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        if role == "draft":
            paths += [(f"{layout.draft_dir(pin.repo, pin.commit)}/{f}", size) for f, size in pin.files]
        out[role] = paths
    return out


def blob_path(plan: HostPlan, pin, blob: str) -> str:
    """Where the Hugging Face cache keeps a file's content (snapshots link to it): blobs/<etag>."""
    return f"{plan.paths.repo_dir(pin.repo)}/blobs/{blob}"


STATUS_READS: Slot[dict[str, HostStatus]] = Slot("status reads", dict)  # host name -> its status before the run


def host_status(plan: HostPlan, on: Host | None = None) -> HostStatus:
    """The host's status before this run changed anything (read once per host per run). `on`: another host of
    this run whose plan `plan` is (a pair's head and worker each read the other's, through its own connection)."""
    target = on or host
    per_run = STATUS_READS()
    if target.name not in per_run:
        per_run[target.name] = _read_status(plan, target)
    return per_run[target.name]


def pair_peer(plan: HostPlan) -> tuple[HostPlan, Host] | None:
    """A pair host's other host in this run, with its plan (None: not in this run, e.g. left out by --limit)."""
    state = ctx_state.get()
    for other in state.activated_hosts:
        theirs = other.data.get("specfleet")
        if isinstance(theirs, HostPlan) and theirs.settings.host == plan.settings.pair_peer:
            return theirs, other
    return None


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
    return plan.derived("wanted_files", _wanted_files)


def _wanted_files(plan: HostPlan) -> dict[str, Want]:
    s, layout = plan.settings, plan.paths
    host_dir = resources.files("specfleet.host")
    want: dict[str, Want] = {
        s.secrets_dir: Want("dir", "700"),
        s.data_dir: Want("dir"),
        layout.bin: Want("dir"),
    }
    for name, source in HOST_PROGRAMS.items():
        want[f"{layout.bin}/{name}"] = Want("file", program_mode(name),
                                       sha256=sha256((host_dir / source).read_bytes()))
    if s.hf_token is not None:
        want[layout.token_file] = Want("file", "600", sha256=sha256(token_text(s, redact=False)))
    behind = spark_files(s)  # behind the fleet's gateways (none without a gateway group)
    if behind:
        want[layout.agent_dir] = Want("dir")
        for path, content in behind.items():
            want[path] = Want("file", "644", sha256=sha256(content))
    if s.profile is None:
        return want
    if s.profile["tiktoken"]:
        want[layout.tiktoken] = Want("dir")
        for name in TIKTOKEN_FILES:
            want[f"{layout.tiktoken}/{name}"] = Want("file", "644", sha256=s.tiktoken_sha256[name])
    if not plan.is_mirror:  # a serving Spark: dockerd comes last under memory pressure (steps/oom.py)
        want[layout.dockerd_oom_dropin] = Want("file", "644", sha256=sha256(dockerd_oom_dropin()))
        if earlyoom_floor_gb(s) > 0:  # earlyoom's command line (steps/oom.py)
            want[layout.earlyoom_dropin] = Want("file", "644", sha256=sha256(earlyoom_dropin(s)))
    rdir = layout.release_dir(plan.release_id)
    want[layout.releases] = Want("dir")
    want[rdir] = Want("dir")
    for path, content in plan.files().items():
        if path.startswith(layout.current + "/"):
            want[f"{rdir}/{path.rsplit('/', 1)[1]}"] = Want("file", "644", sha256=sha256(content))
    if "draft" in plan.pins:
        pin = plan.pins["draft"]
        want[f"{rdir}/{DRAFT_LINK}"] = Want("link", target=layout.draft_dir(pin.repo, pin.commit))
    want[f"{rdir}/{RECORD_FILE}"] = Want("file", "644")  # written once: it records the creation time
    return want


def _read_status(plan: HostPlan, on: Host) -> HostStatus:
    s = plan.settings
    sizes = tuple(path for paths in model_paths(plan).values() for path, _ in paths)
    if plan.mirror_url is not None:  # the mirror warms only what no host has: blobs a new commit shares are not fetched
        sizes += tuple(blob_path(plan, pin, blob) for pin in plan.pins.values() for blob in pin.blobs)
    files = tuple(wanted_files(plan)) + (() if s.hf_token is not None else (plan.paths.token_file,))
    files += () if s.gateways else spark_paths(s)  # left over from a gateway group the fleet no longer has
    files += tuple(p for p in (plan.paths.dockerd_oom_dropin, plan.paths.earlyoom_dropin, plan.paths.earlyoom_marker)
                   if p not in files)  # what steps/oom.py left: the cleanup removes it; the marker says what it did
    trust = pair_reads(s, plan.paths) if s.pair else {}
    return on.get_fact(SpecfleetHost, data_dir=s.data_dir, service=s.service_name, port=s.serve_port,
                       image=s.image, sizes=sizes, files=files + tuple(trust.get("files", ())),
                       users=tuple(s.operator_users) + tuple(trust.get("users", ())),
                       config_key=config_key(plan.rendered.config) if s.profile is not None else "",
                       links=tuple(s.pair_link_interfaces) if s.pair else (), keys=tuple(trust.get("keys", ())),
                       pings=tuple(trust.get("pings", ())), stats=tuple(trust.get("stats", ())))


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
    pinned = pinned_version(plan.settings.hub_client_requirement, "huggingface_hub")
    return pinned is not None and host_status(plan).hub_client == pinned
