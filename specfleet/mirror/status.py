"""The fleet's Hub mirror (olah on the hosts of the inventory group `hub_mirror`, deploys/hub_mirror.py): the one
status read of a mirror host (MirrorStatus) and the programs run there (the warm-up, as a host job; the wait for
olah), each a file of its own in host/probes/. What it renders: mirror/render.py; its layout: host/layout.py's
MirrorLayout; its steps: mirror/steps/hub.py; `specfleet mirror status` reads it with status.read_mirrors. Its part of a
Spark's one status read (SPARK): the sizes of the blobs the mirror would warm.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from ..fleet.programs import program_text
from ..fleet.status import FileReads, Lines, StatusPart, register
from ..host.layout import REGISTRY_PACKAGE_UNIT, REGISTRY_USER, MirrorLayout
from ..plan import HostPlan
from ..serving.status import blob_path
from .render import USER

# The one status read of a mirror host (a shell program of its own, shipped in the one remote command; paths from
# host/layout.py's MirrorLayout, as environment).
_SCRIPT = program_text("mirror_status.sh")
# The warm-up program, run on the mirror host as a host job (mirror/steps/hub.py): mirror/host/mirror_warm.py.
WARM = program_text("mirror_warm.py")
# Waits for olah to answer on its loopback port after a (re)start (mirror/steps/hub.py): mirror/host/olah_ready.py.
OLAH_READY = program_text("olah_ready.py")


@dataclass
class MirrorState:
    python: str = ""  # "3.11" (empty: mirror_python missing)
    venv_module: bool = False
    olah: str = ""  # installed olah version
    user: bool = False
    sha: dict[str, str] = field(default_factory=dict)  # path -> sha256 of the managed files present
    dirs: dict[str, str] = field(default_factory=dict)  # path -> mode|user|group
    service: str = ""
    socket: str = ""
    enabled: tuple[str, str] = ("", "")
    free_bytes: int = 0
    commits: dict[str, int] = field(default_factory=dict)  # "<org>/<repo>/resolve/<commit>" -> bytes cached
    # the image registry (image_mirror)
    registry_pkg: str = ""  # docker-registry's installed version (empty: not installed)
    skopeo_pkg: str = ""  # skopeo's installed version
    registry_user: bool = False  # the package's system user exists
    registry: tuple[str, str] = ("", "")  # is-active of its service and its socket
    registry_enabled: tuple[str, str] = ("", "")
    package_unit: tuple[str, str] = ("", "")  # is-enabled, is-active of the package's own unit (masked: never runs)
    store_bytes: int | None = None  # bytes under image_store_dir (None: no store yet)
    stored: list[tuple[str, str, str]] = field(default_factory=list)  # (repository, tag, digest) in the store

    @property
    def cached_bytes(self) -> int:
        return sum(self.commits.values())


def parse_mirror_state(lines: list[str]) -> MirrorState:
    st = MirrorState()
    for line in lines:
        key, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if key == "python":
            st.python = rest.strip()
        elif key == "venv_module":
            st.venv_module = rest.strip() == "yes"
        elif key == "olah":
            st.olah = rest.strip()
        elif key == "user":
            st.user = bool(rest.strip())
        elif key == "sha" and len(parts) == 2:
            st.sha[parts[1]] = parts[0]
        elif key == "dir" and len(parts) == 2:
            st.dirs[parts[1]] = parts[0]
        elif key == "active":
            st.service, st.socket = (parts + [""])[:2]
        elif key == "enabled":
            enabled, preset = (parts + [""])[:2]
            st.enabled = (enabled, preset)
        elif key == "free":
            st.free_bytes = int(rest) if rest.strip().isdigit() else 0
        elif key == "commit" and len(parts) == 2 and parts[0].isdigit():
            st.commits[parts[1]] = int(parts[0])
        else:
            _parse_registry(st, key, rest, parts)
    return st


def _parse_registry(st: MirrorState, key: str, rest: str, parts: list[str]) -> None:
    first, second = (parts + ["", ""])[:2]
    two = (first, second)
    if key == "registry_pkgs":
        st.registry_pkg, st.skopeo_pkg = two
    elif key == "registry_user":
        st.registry_user = bool(rest.strip())
    elif key == "registry_active":
        st.registry = two
    elif key == "registry_enabled":
        st.registry_enabled = two
    elif key == "registry_package_unit":
        st.package_unit = two
    elif key == "store" and rest.strip().isdigit():
        st.store_bytes = int(rest)
    elif key == "stored" and len(parts) == 3:
        st.stored.append((parts[0], parts[1], parts[2].strip()))


class MirrorStatus(FactBase):
    """Everything the mirror deploy decides on, in one remote command."""

    def command(self, cache_dir: str, python: str, files: tuple[str, ...], dirs: tuple[str, ...],
                store: str = "") -> str:
        p = MirrorLayout(cache_dir)
        env = {"C": cache_dir, "VENV": p.venv, "MODELS": p.models, "PY": python, "U": USER, "SERVICE": p.service_unit,
               "SOCKET": p.socket_unit, "FILES": "\n".join(files), "DIRS": "\n".join(dirs),
               "RSERVICE": p.registry_service_unit, "RSOCKET": p.registry_socket_unit, "RPKG": REGISTRY_PACKAGE_UNIT,
               "RUSER": REGISTRY_USER, "STORE": store}
        return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "; " + _SCRIPT

    def process(self, output) -> MirrorState:
        return parse_mirror_state(list(output))



@dataclass
class SparkImage:
    """A Spark's image state beyond the release's: the pinned image under its upstream name, and the registries its
    dockerd reaches over plain HTTP."""

    upstream_id: str = ""  # image id of the upstream reference by the lock's digest (empty: not on the host)
    insecure: tuple[str, ...] = ()  # registries dockerd talks plain HTTP to (its RegistryConfig, as it runs now)


def parse_spark_image(lines: Lines) -> SparkImage:
    out = SparkImage()
    for key, rest in lines:
        if key == "image_upstream":
            out.upstream_id = rest.strip()
        elif key == "image_registries":
            try:
                configs = json.loads(rest) or {}
            except ValueError:
                configs = {}
            out.insecure = tuple(sorted(name for name, c in configs.items() if isinstance(c, dict)
                                        and c.get("Secure") is False))
    return out


def _spark_env(plan: HostPlan) -> dict[str, str]:
    return {"IMAGE_UPSTREAM": plan.image_upstream or "", "IMAGE_REGISTRY": plan.settings.image_registry or ""}


def _spark_reads(plan: HostPlan) -> FileReads:
    """A Spark that fetches through the mirror: the sizes of the blobs the mirror would warm (it warms only what no
    host has: blobs a new commit shares are not fetched)."""
    if plan.mirror_url is None:
        return FileReads()
    return FileReads(sizes=tuple(blob_path(plan, pin, blob) for pin in plan.pins.values() for blob in pin.blobs))


SPARK: StatusPart[SparkImage] = register(StatusPart(
    "mirror", frozenset({"image_upstream", "image_registries"}), parse_spark_image,
    script=program_text("image_status.sh"), env=_spark_env, reads=_spark_reads))
