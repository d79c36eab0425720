"""One read-only fact with everything the converge decides on, gathered in a single remote command
(one SSH round trip per host: re-runs stay fast)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from importlib import resources

from pyinfra.api import FactBase

from .host import release_state
from .host.layout import DOCKER_UNIT, EARLYOOM_BIN, EARLYOOM_UNIT, Layout, main_pid

# The probe (a shell program of its own, shipped in the one remote command; paths from host/layout.py), and THE
# reader of the release state it runs (host/release_state.py, also installed next to the host tool).
_SCRIPT = (resources.files("specfleet.host") / "probes" / "host_status.sh").read_text(encoding="utf-8")
RELEASE_STATE = (resources.files("specfleet.host") / "release_state.py").read_text(encoding="utf-8")
FILE_STATUS = (resources.files("specfleet.host") / "probes" / "file_status.py").read_text(encoding="utf-8")


@dataclass
class HostStatus:
    arch: str = "unknown"
    os: str = "unknown"
    docker: str = "unknown"  # "ok" or the error docker printed
    runtimes: str = ""
    listeners: int = 0
    active: str = ""
    enabled: str = ""
    current: str = ""
    previous: str = ""
    releases: list[str] = field(default_factory=list)
    lock: str = ""  # owner line of a rollout lock, if one is held
    unit_sha256: str = ""
    container_running: bool = False
    free_bytes: int = 0
    image_id: str = ""
    sizes: dict[str, int] = field(default_factory=dict)  # path -> size (-1 missing)
    # path -> ("dir"|"file", mode, user, group[, sha256]) or ("link", target)
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    groups: dict[str, list[str] | None] = field(default_factory=dict)  # user -> groups (None: no such user)
    hub_client: str = ""  # huggingface_hub version in the fetch virtualenv
    gate: dict = field(default_factory=dict)  # gate.json: {"release", "result": running|passed|failed, "at", ...}
    # current/release.json (what the host serves: config hash, models, image)
    current_release: dict = field(default_factory=dict)
    job: tuple[str, str, str] | None = None  # the host's active job: (id, unit state, key)
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
    # in-image validation verdicts for the config hash (validate_in_image)
    validated: list[str] = field(default_factory=list)
    release_state_error: str = ""  # what release_state.py printed when it failed ("": read, or no python3)
    started: float | None = None  # the serving unit's last start (behind gateways; release_state.started)
    # a pair host: its network interfaces, (interface, IPv4 address/prefix) pairs, and link interface -> (operstate
    # or "missing", speed in Mb/s or None where the driver reports none)
    interfaces: list[str] = field(default_factory=list)
    addresses: list[tuple[str, str]] = field(default_factory=list)
    links: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    pubkeys: dict[str, str] = field(default_factory=dict)  # public key file -> its first line (a pair host's KEYS)
    stats: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> (kind, mode, user, group, size): STATS
    pings: dict[tuple[str, str], str] = field(default_factory=dict)  # (link interface, peer address) -> ok|fail|no-ping
    mem_total: int = 0  # bytes of memory (/proc/meminfo MemTotal: a GB10's one pool for CPU and GPU); 0 unknown
    mem_available: int = 0  # bytes available now (MemAvailable)
    dockerd_oom: int | None = None  # the running dockerd's oom_score_adj (None: no dockerd found)
    cap_bnd: str = ""  # the host's capability bounding set, hex (/proc/self/status CapBnd; "": not read)
    # earlyoom: its binary ("": not installed), its unit's ActiveState and UnitFileState ("enabled", "disabled", ...)
    earlyoom: tuple[str, str, str] = ("", "", "")

    def gate_passed(self, release: str) -> bool:
        """The gate passed for `release` and still holds (behind gateways: the container did not start again since;
        without gateways there is no start marker and this is the gate's result): release_state.gate_holds."""
        return release_state.gate_holds({"current": release, "gate": self.gate, "started": self.started})


# the probe's integer lines: key -> (HostStatus field, its value when the line holds no integer)
_INTS = {"listen": ("listeners", 0), "free": ("free_bytes", 0), "dockerd_oom": ("dockerd_oom", None)}


class SpecfleetHost(FactBase):
    """Status of a specfleet host: docker, port, unit, current release, free disk, image, file sizes/hashes."""

    @staticmethod
    def default() -> HostStatus:
        return HostStatus()

    def command(self, data_dir, service, port, image, sizes=(), files=(), users=(), config_key="", links=(), keys=(),
                pings=(), stats=()):
        lay = Layout(data_dir, service_name=service)
        env = {
            "DATA": data_dir, "SVC": service, "PORT": str(port), "IMAGE": image,
            "CFG": config_key or "-none-",  # validate_in_image.config_key of the release's config
            "SIZES": "\n".join(sizes),
            "FILES": "\n".join(files),
            "USERS": "\n".join(users),
            "LINKS": "\n".join(links),
            "KEYS": "\n".join(keys),
            "PINGS": "\n".join(pings),
            "STATS": "\n".join(stats),
            "UNIT": lay.unit_file, "VALIDATED": lay.validated, "VENV": lay.venv, "DOCKERD_PID": main_pid(DOCKER_UNIT),
            "EARLYOOM_BIN": EARLYOOM_BIN, "EARLYOOM_UNIT": EARLYOOM_UNIT,
            "RELEASE_STATE": RELEASE_STATE, "RELEASE_PATHS": json.dumps(lay.release_paths()),
            "FILE_STATUS": FILE_STATUS,
        }
        # One path per line (Hub file names may hold spaces; the controller refuses control characters).
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"{assigns}; export {' '.join(env)}; {_SCRIPT}"

    def process(self, output):
        st = HostStatus()
        for line in output:
            key, _, rest = line.partition("\t")
            if key == "size":
                size, _, path = rest.partition("\t")
                st.sizes[path] = int(size) if size.lstrip("-").isdigit() else -1
            elif key == "file":
                desc, _, path = rest.partition("\t")
                st.files[path] = tuple(desc.split("|"))
            elif key == "groups":
                user, _, groups = rest.partition("\t")
                st.groups[user] = None if groups == "(missing)" else groups.split()
            elif key in _INTS:
                attr, unknown = _INTS[key]
                setattr(st, attr, int(rest) if re.fullmatch(r"-?[0-9]+", rest) else unknown)
            elif key == "mem":
                st.mem_total, st.mem_available = _kib_pair(rest)
            elif key == "container":
                st.container_running = rest == "true"
            elif key == "image":
                st.image_id = rest
            elif key == "release_state":
                apply_release_state(st, rest)
            elif key == "docker_root":
                free, _, more = rest.partition("\t")
                same, _, path = more.partition("\t")
                st.docker_root, st.docker_root_free = path, int(free) if free.isdigit() else 0
                st.docker_root_same_fs = {"same": True, "other": False}.get(same)
            elif key in ("apparmor", "earlyoom"):  # three tab-separated fields, each possibly empty
                setattr(st, key, tuple((rest.split("\t") + ["", ""])[:3]))
            elif key == "gpu_hook":
                st.gpu_hook = rest
            elif key == "dpkg_busy":
                st.dpkg_busy = rest.split()
            elif key == "ifaces":
                st.interfaces = rest.split()
            elif key == "addr":
                ifname, _, cidr = rest.partition("\t")
                st.addresses.append((ifname.split("@")[0], cidr))
            elif key == "link":
                ifname, state, speed = (rest.split("\t") + ["", ""])[:3]
                st.links[ifname] = (state, int(speed) if speed.isdigit() and int(speed) > 0 else None)
            elif key == "ping":
                ifname, address, result = (rest.split("\t") + ["", ""])[:3]
                st.pings[(ifname, address)] = result
            elif key == "stat":
                desc, _, path = rest.partition("\t")
                st.stats[path] = tuple(desc.split("|"))
            elif key == "pubkey":
                path, _, text = rest.partition("\t")
                st.pubkeys[path] = text
            elif key == "validated":
                st.validated = rest.split()
            elif key in ("arch", "os", "docker", "runtimes", "active", "enabled", "unit_sha256", "hub_client",
                         "default_runtime", "docker_security", "cap_bnd"):
                setattr(st, key, rest)
        return st


def _kib_pair(text: str) -> tuple[int, int]:
    """The probe's `mem` line (MemTotal and MemAvailable in kB, as /proc/meminfo gives them) in bytes; 0 unknown."""
    values = [int(v) * 1024 if v.isdigit() else 0 for v in text.split()] + [0, 0]
    return values[0], values[1]


def apply_release_state(st: HostStatus, line: str) -> None:
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


class ReleaseStatus(FactBase):
    """`specfleet-host status` as JSON: current/previous release, releases, unit state, gate, job ({} if absent)."""

    def command(self, data_dir):
        return f"{shlex.join(Layout(data_dir).host_tool_argv('status'))} 2>/dev/null || echo '{{}}'"

    def process(self, output):
        try:
            return json.loads("\n".join(output))
        except ValueError:
            return {}
