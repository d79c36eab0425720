"""The serving side of a Spark's one status read: what the host is (PLATFORM: docker, the GPU hook, AppArmor, disk) and
what it serves (RELEASE: the unit, the container, the image, the release state, the in-image verdicts), with the
files a converge manages for a release and the model files whose sizes it reads. Its fragments are
host/probes/platform_status.sh and serving/host/release_status.sh; fleet/status.py composes them into the one read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..fleet.programs import program, program_text
from ..fleet.settings import TIKTOKEN_FILES
from ..fleet.status import FileReads, Lines, StatusPart, Want, register, sha256
from ..host.docker_images import pinned
from ..host.layout import DRAFT_LINK, HOST_PROGRAMS, RECORD_FILE, program_mode
from ..pins.lock_images import image_digests
from ..pins.models import ModelPin
from ..plan import HostPlan
from .host import release_state
from .render import token_text
from .validate import config_key

# THE reader of the release state (release_state.py, also installed next to the host tool), shipped in the read
RELEASE_STATE = program_text("release_state.py")


def _int(text: str, unknown: Any) -> Any:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else unknown


@dataclass
class Platform:
    arch: str = "unknown"
    os: str = "unknown"
    docker: str = "unknown"  # "ok" or the error docker printed
    runtimes: str = ""
    default_runtime: str = ""  # docker's default runtime (DGX OS 7 sets nvidia)
    # docker info SecurityOptions (JSON), e.g. ["name=apparmor","name=seccomp,profile=default"]
    docker_security: str = ""
    docker_root: str = ""  # docker's root dir (DockerRootDir); "" if unknown
    docker_root_free: int = 0  # free bytes under docker_root
    docker_root_same_fs: bool | None = None  # docker_root on the same filesystem as data_dir (None: unknown)
    gpu_hook: str | None = None  # path of nvidia-container-runtime-hook ("": missing, None: not reported)
    # (kernel AppArmor enabled Y/N, docker-default loaded count, apparmor_parser path)
    apparmor: tuple[str, str, str] | None = None
    # running apt/dpkg/unattended-upgrades processes (they hold the dpkg lock)
    dpkg_busy: list[str] = field(default_factory=list)
    free_bytes: int = 0  # free bytes under data_dir


_PLATFORM_TEXT = {"arch", "os", "docker", "runtimes", "default_runtime", "docker_security", "gpu_hook"}


def parse_platform(lines: Lines) -> Platform:
    st = Platform()
    for key, rest in lines:
        if key in _PLATFORM_TEXT:
            setattr(st, key, rest)
        elif key == "apparmor":  # three tab-separated fields, each possibly empty
            enabled, loaded, parser = (rest.split("\t") + ["", ""])[:3]
            st.apparmor = (enabled, loaded, parser)
        elif key == "dpkg_busy":
            st.dpkg_busy = rest.split()
        elif key == "free":
            st.free_bytes = _int(rest, 0)
        elif key == "docker_root":
            free, _, more = rest.partition("\t")
            same, _, path = more.partition("\t")
            st.docker_root, st.docker_root_free = path, int(free) if free.isdigit() else 0
            st.docker_root_same_fs = {"same": True, "other": False}.get(same)
    return st


@dataclass
class Release:
    serving_unit: str = ""  # the unit active/enabled/container_running describe: the current release's, else the plan's
    listeners: int = 0
    active: str = ""
    enabled: str = ""
    unit_sha256: str = ""
    container_running: bool = False
    image_id: str = ""  # the image the unit runs, when it is the pinned one (docker_images.pinned); "": to pull
    validated: list[str] = field(default_factory=list)  # in-image validation verdicts for the config hash
    hub_client: str = ""  # huggingface_hub version in the fetch virtualenv
    # release_state.read(): what the host serves and keeps
    current: str = ""
    previous: str = ""
    releases: list[str] = field(default_factory=list)
    lock: str = ""  # owner line of a rollout lock, if one is held
    gate: dict = field(default_factory=dict)  # gate.json: {"release", "result": running|passed|failed, "at", ...}
    # current/release.json (what the host serves: config hash, models, image)
    current_release: dict = field(default_factory=dict)
    job: tuple[str, str, str] | None = None  # the host's active job: (id, unit state, key)
    started: float | None = None  # the serving unit's last start (behind gateways; release_state.started)
    release_state_error: str = ""  # what release_state.py printed when it failed ("": read, or no python3)

    def gate_passed(self, release: str) -> bool:
        """The gate passed for `release` and still holds (behind gateways: the container did not start again since;
        without gateways there is no start marker and this is the gate's result): release_state.gate_holds."""
        return release_state.gate_holds({"current": release, "gate": self.gate, "started": self.started})


_RELEASE_TEXT = {"serving_unit", "active", "enabled", "unit_sha256", "hub_client"}


def parse_release(lines: Lines) -> Release:
    st = Release()
    for key, rest in lines:
        if key in _RELEASE_TEXT:
            setattr(st, key, rest)
        elif key == "listen":
            st.listeners = _int(rest, 0)
        elif key == "container":
            st.container_running = rest == "true"
        elif key == "image":
            st.image_id = parse_image(rest)
        elif key == "validated":
            st.validated = rest.split()
        elif key == "release_state":
            apply_release_state(st, rest)
    return st


def parse_image(rest: str) -> str:
    """The `image` line: `<id> <RepoDigests as JSON><TAB><the lock's digests>` -> the id, when the image under the
    unit's tag is the pinned one or the image is not pinned; "" otherwise (absent, or a tag on another image: it is
    pulled again). THE rule: docker_images.pinned."""
    found, _, pins = rest.partition("\t")
    image_id, _, digests = found.strip().partition(" ")
    if not image_id or not pins.split():
        return image_id
    try:
        repo_digests = json.loads(digests) if digests else []
    except ValueError:
        repo_digests = []
    return image_id if pinned(repo_digests if isinstance(repo_digests, list) else [], pins.split()) else ""


def apply_release_state(st: Release, line: str) -> None:
    """Fill st's release fields from release_state.read()'s JSON. Output that is not its JSON (a python3 that
    failed) sets st.release_state_error: the preflight refuses the host rather than decide on a guess."""
    try:
        rs = json.loads(line)
    except ValueError:
        rs = None
    if not isinstance(rs, dict):
        st.release_state_error = line[-200:] or "no output"
        return
    st.current, st.previous = rs.get("current") or "", rs.get("previous") or ""
    st.releases, st.lock = list(rs.get("releases") or []), rs.get("lock") or ""
    st.gate, st.current_release = rs.get("gate") or {}, rs.get("record") or {}
    st.started = rs.get("started")
    job = rs.get("job")
    st.job = (job["id"], job["unit"], job["key"]) if job and job.get("unit") in ("active", "activating") else None


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


def blob_path(plan: HostPlan, pin: ModelPin, blob: str) -> str:
    """Where the Hugging Face cache keeps a file's content (snapshots link to it): blobs/<etag>."""
    return f"{plan.paths.repo_dir(pin.repo)}/blobs/{blob}"


def _release_env(plan: HostPlan) -> dict[str, str]:
    s, lay = plan.settings, plan.paths
    return {"PORT": str(s.serve_port), "IMAGE": s.image,
            "IMAGE_PINS": " ".join(image_digests(plan.image_digest, plan.image_platforms)),
            # validate_in_image.config_key of the release's config
            "CFG": config_key(plan.rendered.config) if s.profile is not None else "-none-",
            "UNIT": lay.unit_file, "VALIDATED": lay.validated, "VENV": lay.venv,
            "RELEASE_STATE": RELEASE_STATE, "RELEASE_PATHS": json.dumps(lay.release_paths())}


def _release_reads(plan: HostPlan) -> FileReads:
    s = plan.settings
    sizes = tuple(path for paths in model_paths(plan).values() for path, _ in paths)
    token = () if s.hf_token is not None else (plan.paths.token_file,)  # one left behind: the cleanup removes it
    return FileReads(sizes=sizes, files=token, users=tuple(s.operator_users))


def _release_wanted(plan: HostPlan) -> dict[str, Want]:
    """The host tools, the token, the encodings and the release's directory with its files."""
    s, layout = plan.settings, plan.paths
    want: dict[str, Want] = {s.secrets_dir: Want("dir", "700"), s.data_dir: Want("dir"), layout.bin: Want("dir")}
    for name, source in HOST_PROGRAMS.items():
        want[f"{layout.bin}/{name}"] = Want("file", program_mode(name), sha256=sha256(program(source).read_bytes()))
    if s.hf_token is not None:
        want[layout.token_file] = Want("file", "600", sha256=sha256(token_text(s, redact=False)))
    if s.profile is None:
        return want
    if s.profile["tiktoken"]:
        want[layout.tiktoken] = Want("dir")
        for name in TIKTOKEN_FILES:
            want[f"{layout.tiktoken}/{name}"] = Want("file", "644", sha256=s.tiktoken_sha256[name])
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
PLATFORM = register(StatusPart(
    "platform", frozenset({"arch", "os", "docker", "runtimes", "default_runtime", "docker_security", "docker_root",
                           "gpu_hook", "apparmor", "dpkg_busy", "free"}),
    parse_platform, script=program_text("platform_status.sh")))
RELEASE = register(StatusPart(
    "release", frozenset({"serving_unit", "listen", "active", "enabled", "unit_sha256", "container", "image",
                          "release_state", "validated", "hub_client"}),
    parse_release, script=program_text("release_status.sh"), env=_release_env,
    reads=_release_reads, wanted=_release_wanted))
