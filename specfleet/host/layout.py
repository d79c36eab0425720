"""THE host layout: where everything specfleet manages lives on a host, and the host tool's command line.

Stdlib only. The controller imports it (`specfleet.host.layout`) to render, read and change hosts; the deploy also
installs it on each host next to the host tool (<data_dir>/bin/layout.py), which imports it from there. Every
other program gets its paths from here, as arguments or environment: no host path is written out anywhere else.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

UNIT_DIR = "/etc/systemd/system"  # where the deploy writes systemd units
HOST_TOOL = "specfleet-host"  # the host tool's installed name (host/specfleet_host.py)
FETCH_TOOL = "fetch-model"  # the model fetcher's installed name (host/fetch_model.py)
LAYOUT_FILE = "layout.py"  # this module's installed name, next to the host tool
LIB_FILE = "hostlib.py"  # the host tool's helpers, installed next to it
STATE_FILE = "release_state.py"  # THE reader of the release state, installed next to it (and shipped by probes)
DRAIN_FILE = "drain.py"  # the drain before a restart behind gateways, installed next to it
READINESS_FILE = "readiness.py"  # the readiness gate (/health, then the smoke completion), installed next to it
PAIR_SWITCH_FILE = "pair_switch.py"  # a pair's switch over both hosts, driven by the head, installed next to it
STAGE_FILE = "release_stage.py"  # staging a release's files from one bundle, installed next to it
JOBS_FILE = "host_jobs.py"  # host jobs (work detached from the SSH session), installed next to it
# a Spark's docker images: THE rule of the pinned image, the removal of unused ones (the prune, the image pull)
IMAGES_FILE = "docker_images.py"
AGENT_TOOL = "gateway-agent"  # the readiness agent the gateways ask (host/gateway_agent.py)
DROP_CACHES_TOOL = "drop-caches"  # the serving unit's ExecStartPre: sync + drop the page cache (host/drop_caches.sh)
CONTAINER_MEMORY_VAR = "SPECFLEET_CONTAINER_MEMORY"  # drop-caches' cap for the container (docker run --memory=$VAR)
PAIR_LINK_TOOL = "pair-link"  # a pair host's link: netplan applied with confirm-or-revert (host/pair_link.py)
PAIR_GATE_TOOL = "pair-gate"  # the worker's forced command for the head's MPI key (host/pair_gate.py)
DOCKER_UNIT = "docker.service"  # docker's unit: dockerd is its main process (a snap's docker is not found: left alone)
SSH_UNIT = "ssh.service"  # OpenSSH's unit: the sshd listener is its main process (sessions are its children)
EARLYOOM_UNIT = "earlyoom.service"  # the distribution's earlyoom (Debian/Ubuntu package earlyoom), a serving Spark's
EARLYOOM_BIN = "/usr/bin/earlyoom"  # where that package installs it (its unit's ExecStart, which the drop-in replaces)


def main_pid(unit: str) -> str:
    """THE shell command that prints a unit's main process id (0: not running): how dockerd and sshd are found."""
    return f"systemctl show -p MainPID --value {unit}"


NETPLAN_FILE = "/etc/netplan/60-specfleet-pair.yaml"  # a pair host's link addresses (pair_files.netplan)
PAIR_USER = "specfleet-mpi"  # the worker's login for the head's MPI key: no password, may sudo the gate only
PAIR_HOME = "/var/lib/specfleet-mpi"  # PAIR_USER's home, root-owned: .ssh/authorized_keys names the head's MPI key
HOST_KEY_FILE = "/etc/ssh/ssh_host_ed25519_key.pub"  # a worker's sshd ed25519 host key, pinned by its pair's head
SUDOERS_FILE = "/etc/sudoers.d/specfleet-pair"  # the worker's rule for PAIR_USER (pair_files.sudoers)
PAIR_MOUNT = "/opt/specfleet-pair"  # where the head's container sees <data_dir>/pair (read-only): key, known_hosts
# the head's pair files, in <data_dir>/pair and (the same files) in its container under PAIR_MOUNT
PAIR_KEY_FILE = "mpi_key"  # the pair's MPI key (ed25519, generated on the head, root 0600)
PAIR_KNOWN_HOSTS_FILE = "known_hosts"  # the worker's host key pinned at its link addresses (pair_files.known_hosts)
PAIR_AGENT_FILE = "pair-agent"  # mpirun's rsh agent (host/pair_agent.sh), which uses the two files beside it
PAIR_AGENT = f"{PAIR_MOUNT}/{PAIR_AGENT_FILE}"  # the agent as the head's container runs it (plm_rsh_agent)
PAIR_AGENT_ENV = ("SPECFLEET_PAIR_USER", "SPECFLEET_PAIR_PORT")  # the agent's login and port (host/pair_agent.sh)
PAIR_SWITCH_KEY_ENV = "SPECFLEET_PAIR_KEY"  # the agent's key instead of the MPI key: the head's switch key
PAIR_SWITCH_FLAG = "--switch"  # the pair gate of the head's switch key: the switch's command only
PAIR_LINK_UNIT = "specfleet-pair-link"  # transient unit of a link change awaiting its confirmation
NETPLAN_TRY_READY = "/run/netplan/netplan-try.ready"  # netplan try's stamp: applied, awaiting accept/reject
# Installed name in <data_dir>/bin -> the program's file in specfleet/host (the host tool imports the others).
HOST_PROGRAMS = {HOST_TOOL: "specfleet_host.py", FETCH_TOOL: "fetch_model.py", LAYOUT_FILE: "layout.py",
                 LIB_FILE: "hostlib.py", STATE_FILE: "release_state.py", DRAIN_FILE: "drain.py",
                 READINESS_FILE: "readiness.py", PAIR_SWITCH_FILE: "pair_switch.py", STAGE_FILE: "release_stage.py",
                 JOBS_FILE: "host_jobs.py", AGENT_TOOL: "gateway_agent.py", DROP_CACHES_TOOL: "drop_caches.sh",
                 IMAGES_FILE: "docker_images.py"}
MODULES = (LAYOUT_FILE, LIB_FILE, STATE_FILE, DRAIN_FILE, READINESS_FILE, PAIR_SWITCH_FILE, STAGE_FILE,
           JOBS_FILE, IMAGES_FILE)  # 0644
RELEASE_ID = r"r-[0-9a-f]{12}"  # THE form of a release id (plan.Rendered: r- and 12 hex digits of a content hash)
PAIR_WORKER_FLAG = "--pair-worker"  # `activate ID --pair-worker`: the worker's side of its head's switch
PAIR_LEAVE_CMD = "leave-pair"  # `leave-pair ID`: a worker whose first pair release ID failed serves alone again

JOB_UNIT_PREFIX = "specfleet-job-"  # transient systemd unit of a host job: specfleet-job-<id>
MIRROR_UNIT = "specfleet-hub-mirror"  # the Hub mirror's units: olah; -proxy.socket / -proxy.service in front of it
REGISTRY_UNIT = "specfleet-image-registry"  # the image registry's units: read-only registry; -proxy.socket / .service
REGISTRY_PACKAGE_UNIT = "docker-registry.service"  # the package's own unit: masked, never started (all interfaces)
REGISTRY_BIN = "/usr/bin/docker-registry"  # the distribution's registry (Debian/Ubuntu package docker-registry)
REGISTRY_USER = "docker-registry"  # the system user that package creates: the registry runs as it and owns the store
# The files of a release directory (<data_dir>/releases/<id>/, reached as <data_dir>/current/ once active).
CONFIG_FILE = "extra-llm-api-config.yml"  # trtllm-serve's options
CONTAINER_TIKTOKEN = "/opt/tiktoken"  # where the serving container sees the tiktoken encodings (read-only)
CONTAINER_CONFIG = "/etc/specfleet/extra-llm-api-config.yml"  # where the serving container reads CONFIG_FILE
SMOKE_FILE = "smoke.json"  # the readiness gate's smoke completion request
RECORD_FILE = "release.json"  # what the release is: id, models, image, gate settings (written once)
DRAFT_LINK = "draft"  # -> the draft model's directory (speculative decoding with a separate draft)


def lock_owner_text(kind: str, run_id: str, user: str, host: str, pid: int) -> str:
    """THE run lock's owner line: `<kind> <run id> by <user>@<controller host> pid <pid>` (kind: rollout, converge,
    bench); read back by lock_kind and by the controller's stale-lock check."""
    return f"{kind} {run_id} by {user}@{host} pid {pid}"


def lock_kind(owner: str | None) -> str | None:
    """The kind of run holding the lock (its owner line's first word); None without a lock."""
    return owner.split(" ", 1)[0] if owner else None


def program_mode(name: str) -> str:
    """The mode an installed host program (or module) has: 644 for the imported modules, else 755."""
    return "644" if name in MODULES else "755"


def cache_folder(repo: str) -> str:
    """Hugging Face's cache folder name of a model repo: `org/name` -> `models--org--name`."""
    return f"models--{repo.replace('/', '--')}"


def repo_of_cache_folder(name: str) -> str:
    """The inverse of cache_folder: `models--org--name` -> `org/name`."""
    return name[len("models--"):].replace("--", "/", 1)


@dataclass(frozen=True)
class Layout:
    """Every path of one host, derived from data_dir (and secrets_dir / service_name, the serving unit's name, for the
    token and the unit)."""

    data_dir: str
    secrets_dir: str = ""
    service_name: str = ""

    record_file = RECORD_FILE  # the names release_state.py needs besides paths (it imports nothing of this module)
    job_unit_prefix = JOB_UNIT_PREFIX

    @classmethod
    def of(cls, settings) -> "Layout":
        """The layout of a host's validated settings (anything with data_dir, secrets_dir and serving_unit)."""
        return cls(settings.data_dir, settings.secrets_dir, settings.serving_unit)

    hf_home = property(lambda self: f"{self.data_dir}/hf")
    hub_cache = property(lambda self: f"{self.data_dir}/hf/hub")
    tiktoken = property(lambda self: f"{self.data_dir}/tiktoken")
    drafts = property(lambda self: f"{self.data_dir}/drafts")
    releases = property(lambda self: f"{self.data_dir}/releases")
    current = property(lambda self: f"{self.data_dir}/current")
    current_record = property(lambda self: f"{self.data_dir}/current/{RECORD_FILE}")
    previous = property(lambda self: f"{self.data_dir}/previous")
    gate_file = property(lambda self: f"{self.data_dir}/gate.json")
    started_marker = property(lambda self: f"{self.data_dir}/started")  # touched at every start (behind gateways)
    gateways_file = property(lambda self: f"{self.data_dir}/gateways.json")  # the gateways this Spark is behind
    agent_dir = property(lambda self: f"{self.data_dir}/agent")  # the readiness agent's only writable directory
    agent_acks = property(lambda self: f"{self.data_dir}/agent/acks.json")  # gateway -> when the agent said down
    lock = property(lambda self: f"{self.data_dir}/lock")
    lock_owner = property(lambda self: f"{self.data_dir}/lock/owner")
    jobs = property(lambda self: f"{self.data_dir}/jobs")
    active_job = property(lambda self: f"{self.data_dir}/jobs/active")
    validated = property(lambda self: f"{self.data_dir}/validated")
    bin = property(lambda self: f"{self.data_dir}/bin")
    venv = property(lambda self: f"{self.data_dir}/venv")
    host_tool = property(lambda self: f"{self.data_dir}/bin/{HOST_TOOL}")
    fetch_tool = property(lambda self: f"{self.data_dir}/bin/{FETCH_TOOL}")
    agent_tool = property(lambda self: f"{self.data_dir}/bin/{AGENT_TOOL}")
    drop_caches_tool = property(lambda self: f"{self.data_dir}/bin/{DROP_CACHES_TOOL}")
    mem_at_start = property(lambda self: f"{self.data_dir}/mem-at-start.json")  # drop-caches' record of the last start
    container_memory = property(lambda self: f"{self.data_dir}/container-memory.env")  # drop-caches' cap, an env file
    layout_file = property(lambda self: f"{self.data_dir}/bin/{LAYOUT_FILE}")
    token_file = property(lambda self: f"{self.secrets_dir}/hf_token")
    ngc_auth_file = property(lambda self: f"{self.secrets_dir}/ngc-auth.json")  # a mirror's NGC login, for skopeo
    unit_file = property(lambda self: f"{UNIT_DIR}/{self.service_name}.service")
    unit_dropins = property(lambda self: f"{UNIT_DIR}/{self.service_name}.service.d")  # drop-ins beside the unit
    start_marker_dropin = property(lambda self: f"{self.unit_dropins}/specfleet-start-marker.conf")  # behind gateways
    dockerd_oom_dropin = property(lambda self: f"{UNIT_DIR}/{DOCKER_UNIT}.d/specfleet-oom.conf")  # a serving Spark
    earlyoom_dropin = property(lambda self: f"{UNIT_DIR}/{EARLYOOM_UNIT}.d/specfleet.conf")  # its floor, whom it spares
    earlyoom_marker = property(lambda self: f"{self.data_dir}/earlyoom.specfleet")  # what the deploy did: the cleanup's
    pair_dir = property(lambda self: f"{self.data_dir}/pair")  # a pair host's link and MPI files (root 0700)
    netplan_staged = property(lambda self: f"{self.pair_dir}/netplan.yaml")  # the link's netplan, as rendered
    netplan_previous = property(lambda self: f"{self.pair_dir}/netplan.previous")  # NETPLAN_FILE before a try
    link_state = property(lambda self: f"{self.pair_dir}/link.json")  # the last link change: state, when, why
    link_confirm = property(lambda self: f"{self.pair_dir}/link.confirm")  # the controller's confirmation
    link_log = property(lambda self: f"{self.pair_dir}/link.log")  # netplan try's output of the last change
    pair_gate = property(lambda self: f"{self.data_dir}/bin/{PAIR_GATE_TOOL}")
    pair_switch_lock = property(lambda self: f"{self.data_dir}/.pair-switch.lock")  # one worker switch at a time
    pair_link_tool = property(lambda self: f"{self.data_dir}/bin/{PAIR_LINK_TOOL}")
    pair_key = property(lambda self: f"{self.pair_dir}/{PAIR_KEY_FILE}")
    pair_known_hosts = property(lambda self: f"{self.pair_dir}/{PAIR_KNOWN_HOSTS_FILE}")
    pair_agent = property(lambda self: f"{self.pair_dir}/{PAIR_AGENT_FILE}")
    pair_key_pub = property(lambda self: f"{self.pair_key}.pub")  # its public half, which the worker authorizes
    # the head's switch key (ed25519, root 0600), for its host job's switch of the worker: outside pair_dir, so no
    # container ever sees it (the MPI key's gate runs orted; this key's runs the switch)
    pair_switch_dir = property(lambda self: f"{self.data_dir}/pair-switch")
    pair_switch_key = property(lambda self: f"{self.pair_switch_dir}/switch_key")
    pair_switch_key_pub = property(lambda self: f"{self.pair_switch_key}.pub")
    pair_ssh_dir = property(lambda self: f"{PAIR_HOME}/.ssh")  # the worker's, root-owned
    pair_authorized_keys = property(lambda self: f"{PAIR_HOME}/.ssh/authorized_keys")  # the head's key, restricted
    sudoers_staged = property(lambda self: f"{SUDOERS_FILE}.new")  # checked by visudo first (sudo skips names with .)

    def pair_link_argv(self, *args: str) -> list[str]:
        """THE link tool's command line: `<data_dir>/bin/pair-link --data-dir <data_dir> ARGS...`."""
        return [self.pair_link_tool, "--data-dir", self.data_dir, *args]

    @staticmethod
    def pair_worker_words(rid: str) -> list[str]:
        """THE command the head's switch asks the worker's pair gate for (over the MPI key), which the gate runs as
        the host tool beside it: `specfleet-host activate ID --pair-worker`."""
        return [HOST_TOOL, "activate", rid, PAIR_WORKER_FLAG]

    @staticmethod
    def pair_leave_words(rid: str) -> list[str]:
        """THE command the head's revert asks the worker for when the pair's release `rid` (the worker's) failed and
        the head goes back to serving alone: `specfleet-host leave-pair ID` (the worker goes back to its own)."""
        return [HOST_TOOL, PAIR_LEAVE_CMD, rid]

    def pair_gate_argv(self, switch: bool = False) -> list[str]:
        """THE pair gate's command lines on the worker (sudo runs them as root, with exactly these arguments): the
        MPI key's (OpenMPI's launch of orted in the container) and, `switch`, the switch key's (the head's switch)."""
        if switch:
            return [self.pair_gate, PAIR_SWITCH_FLAG]
        return [self.pair_gate, "--container", self.service_name, "--agent", PAIR_AGENT]

    def repo_dir(self, repo: str) -> str:
        return f"{self.hub_cache}/{cache_folder(repo)}"

    def snapshot(self, repo: str, commit: str) -> str:
        return f"{self.repo_dir(repo)}/snapshots/{commit}"

    def draft_dir(self, repo: str, commit: str) -> str:
        return f"{self.drafts}/{repo.replace('/', '--')}/{commit}"

    def release_dir(self, release: str) -> str:
        return f"{self.releases}/{release}"

    def release_file(self, release: str, name: str) -> str:
        return f"{self.releases}/{release}/{name}"

    def current_file(self, name: str) -> str:
        return f"{self.current}/{name}"

    def job_dir(self, job: str) -> str:
        return f"{self.jobs}/{job}"

    @staticmethod
    def job_run_state(job: str) -> str:
        """A job's final state, also written to /run when the data disk is full."""
        return f"/run/{JOB_UNIT_PREFIX}{job}.json"

    def release_paths(self) -> dict[str, str]:
        """The paths release_state.py reads, as it takes them on its command line (JSON)."""
        return {"current": self.current, "previous": self.previous, "releases": self.releases,
                "gate_file": self.gate_file, "lock_owner": self.lock_owner, "active_job": self.active_job,
                "jobs": self.jobs, "record_file": self.record_file, "job_unit_prefix": self.job_unit_prefix,
                "started_marker": self.started_marker}

    def host_tool_argv(self, *args: str) -> list[str]:
        """THE host tool's command line: `<data_dir>/bin/specfleet-host --data-dir <data_dir> ARGS...`."""
        return [self.host_tool, "--data-dir", self.data_dir, *args]

    def stage_argv(self, rid: str, files: dict[str, str], record: str, draft: str | None) -> list[str]:
        """THE stage command: release `rid`'s files by name, its release.json and its draft link's target as one
        bundle, base64 of JSON (host/release_stage.py reads it). Release files hold nothing secret."""
        bundle = json.dumps({"files": files, "record": record, "draft": draft}, sort_keys=True).encode()
        return self.host_tool_argv("stage", rid, "--bundle", base64.b64encode(bundle).decode())


@dataclass(frozen=True)
class MirrorLayout:
    """Every path of a Hub mirror host (the inventory group hub_mirror), derived from mirror_cache_dir:

        venv/        olah, pinned (mirror_requirement), from pip_index_url
        olah.toml    olah's config (upstream = the mirror host's hub_endpoint)
        repos/       olah's cache: files/models/<org>/<repo>/resolve/<commit>/<file> (written by the service user)
        logs/        olah's logs

        registry/    the image registry's configs (reader.yml: the fleet's, read-only; writer.yml: the fetch job's)

    and its units in UNIT_DIR: MIRROR_UNIT.service (olah), MIRROR_UNIT-proxy.socket and MIRROR_UNIT-proxy.service
    (systemd-socket-proxyd in front of olah); REGISTRY_UNIT.service, -proxy.socket and -proxy.service likewise for
    the image registry (image_mirror), whose store is image_store_dir."""

    cache_dir: str

    venv = property(lambda self: f"{self.cache_dir}/venv")
    python = property(lambda self: f"{self.cache_dir}/venv/bin/python")
    pip = property(lambda self: f"{self.cache_dir}/venv/bin/pip")
    config = property(lambda self: f"{self.cache_dir}/olah.toml")
    repos = property(lambda self: f"{self.cache_dir}/repos")
    models = property(lambda self: f"{self.cache_dir}/repos/files/models")  # <org>/<repo>/resolve/<commit>/<file>
    logs = property(lambda self: f"{self.cache_dir}/logs")
    service_unit = property(lambda self: f"{MIRROR_UNIT}.service")
    socket_unit = property(lambda self: f"{MIRROR_UNIT}-proxy.socket")
    proxy_unit = property(lambda self: f"{MIRROR_UNIT}-proxy.service")
    service = property(lambda self: f"{UNIT_DIR}/{self.service_unit}")
    socket = property(lambda self: f"{UNIT_DIR}/{self.socket_unit}")
    proxy = property(lambda self: f"{UNIT_DIR}/{self.proxy_unit}")
    units = property(lambda self: (self.service, self.socket, self.proxy))
    # the image registry (image_mirror): its configs here, its store in image_store_dir
    registry_dir = property(lambda self: f"{self.cache_dir}/registry")
    reader_config = property(lambda self: f"{self.cache_dir}/registry/reader.yml")  # the fleet-facing, read-only one
    writer_config = property(lambda self: f"{self.cache_dir}/registry/writer.yml")  # the fetch job's, on loopback
    registry_service_unit = property(lambda self: f"{REGISTRY_UNIT}.service")
    registry_socket_unit = property(lambda self: f"{REGISTRY_UNIT}-proxy.socket")
    registry_proxy_unit = property(lambda self: f"{REGISTRY_UNIT}-proxy.service")
    registry_service = property(lambda self: f"{UNIT_DIR}/{self.registry_service_unit}")
    registry_socket = property(lambda self: f"{UNIT_DIR}/{self.registry_socket_unit}")
    registry_proxy = property(lambda self: f"{UNIT_DIR}/{self.registry_proxy_unit}")
    registry_units = property(lambda self: (self.registry_service, self.registry_socket, self.registry_proxy))


@dataclass(frozen=True)
class GatewayLayout:
    """Every path of a gateway host (the inventory group gateway): HAProxy from the distribution, its config and
    specfleet's files next to it, and its runtime API socket."""

    config_dir: str = "/etc/haproxy"
    admin_socket: str = "/run/haproxy/admin.sock"  # HAProxy's runtime API (drain, ready, show stat)
    state_file: str = "/var/lib/haproxy/server-state"  # server states saved before a reload, loaded after it
    # the digest of the file set the running HAProxy loaded, written after each start/reload succeeded: a run that
    # installed files but did not get to reload (a failure, a dead controller) reloads on the next run
    loaded_stamp: str = "/var/lib/haproxy/specfleet-loaded"

    config = property(lambda self: f"{self.config_dir}/haproxy.cfg")
    models_map = property(lambda self: f"{self.config_dir}/specfleet-models.map")  # model -> backend
    paths_map = property(lambda self: f"{self.config_dir}/specfleet-paths.map")  # /models/<model>/v1/ -> backend
    keys_map = property(lambda self: f"{self.config_dir}/specfleet-keys.map")  # sha256(key) -> key name; root-only
    models_lua = property(lambda self: f"{self.config_dir}/specfleet-models.lua")  # GET /v1/models
    tls_pem = property(lambda self: f"{self.config_dir}/specfleet-tls.pem")  # certificate chain + key; root-only
