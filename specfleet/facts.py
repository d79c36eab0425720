"""One read-only fact with everything the converge decides on, gathered in a single remote command
(one SSH round trip per host: re-runs stay fast)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

_SCRIPT = r"""
echo "arch	$(uname -m)"
( . /etc/os-release 2>/dev/null; echo "os	${PRETTY_NAME:-unknown}" )
droot=
if out=$(docker info --format '{{json .Runtimes}}{{"\n"}}{{.DefaultRuntime}}{{"\n"}}{{.DockerRootDir}}{{"\n"}}{{json .SecurityOptions}}' 2>&1); then
  echo "docker	ok"; echo "runtimes	$(printf '%s\n' "$out" | sed -n 1p)"
  echo "default_runtime	$(printf '%s\n' "$out" | sed -n 2p)"; droot=$(printf '%s\n' "$out" | sed -n 3p)
  echo "docker_security	$(printf '%s\n' "$out" | sed -n 4p)"
else echo "docker	$(printf '%s' "$out" | tail -n 1)"; fi
echo "gpu_hook	$(command -v nvidia-container-runtime-hook 2>/dev/null)"
echo "apparmor	$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)	$(grep -c '^docker-default ' /sys/kernel/security/apparmor/profiles 2>/dev/null)	$(command -v apparmor_parser 2>/dev/null)"
echo "dpkg_busy	$(ps -eo comm= 2>/dev/null | grep -E -x 'apt|apt-get|aptitude|dpkg|unattended-upgr' | sort -u | tr '\n' ' ')"
echo "listen	$(ss -Hltn "sport = :$PORT" 2>/dev/null | wc -l)"
echo "active	$(systemctl is-active "$SVC" 2>/dev/null)"
echo "enabled	$(systemctl is-enabled "$SVC" 2>/dev/null)"
echo "current	$(basename "$(readlink "$DATA/current" 2>/dev/null)" 2>/dev/null)"
echo "previous	$(cat "$DATA/previous" 2>/dev/null)"
echo "releases	$(ls "$DATA/releases" 2>/dev/null | tr '\n' ' ')"
echo "lock	$(cat "$DATA/lock/owner" 2>/dev/null)"
echo "unit_sha256	$(sha256sum "/etc/systemd/system/$SVC.service" 2>/dev/null | cut -d' ' -f1)"
echo "container	$(docker inspect --format '{{.State.Running}}' "$SVC" 2>/dev/null)"
d="$DATA"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
if [ -n "$droot" ]; then set -- $(df -PB1 "$d" "$droot" 2>/dev/null | awk 'NR>1{print $1, $4}')
  [ "$#" -eq 4 ] && echo "docker_root	$4	$([ "$1" = "$3" ] && echo same || echo other)	$droot"; fi
echo "image	$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null)"
printf '%s\n' "$SIZES" | while IFS= read -r f; do [ -n "$f" ] || continue
  s=$(stat -L -c %s "$f" 2>/dev/null || echo -1); echo "size	$s	$f"; done
printf '%s\n' "$FILES" | while IFS= read -r f; do [ -n "$f" ] || continue
  if [ -L "$f" ]; then echo "file	link|$(readlink "$f")	$f"
  elif [ -d "$f" ]; then echo "file	dir|$(stat -c '%a|%U|%G' "$f")	$f"
  elif [ -f "$f" ]; then echo "file	file|$(stat -c '%a|%U|%G' "$f")|$(sha256sum "$f" | cut -d' ' -f1)	$f"; fi
done
printf '%s\n' "$USERS" | while IFS= read -r u; do [ -n "$u" ] || continue
  echo "groups	$u	$(id -nG "$u" 2>/dev/null || echo '(missing)')"; done
echo "gate	$(tr -d '\n' 2>/dev/null < "$DATA/gate.json")"
echo "current_release	$(tr -d '\n' 2>/dev/null < "$DATA/current/release.json")"
j=$(cat "$DATA/jobs/active" 2>/dev/null); [ -n "$j" ] && echo "job	$j	$(systemctl is-active "specfleet-job-$j" 2>/dev/null)	$(sed -n 's/.*"key": "\([^"]*\)".*/\1/p' "$DATA/jobs/$j/job.json" 2>/dev/null)"
echo "validated	$(ls "$DATA/validated" 2>/dev/null | grep -e "^$CFG-" | tr '\n' ' ')"
echo "hub_client	$(sed -n 's/^Version: //p' "$DATA"/venv/lib/python3*/site-packages/huggingface_hub-*.dist-info/METADATA 2>/dev/null | head -n 1)"
true
"""


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
    files: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> ("dir"|"file", mode, user, group[, sha256]) or ("link", target)
    groups: dict[str, list[str] | None] = field(default_factory=dict)  # user -> groups (None: no such user)
    hub_client: str = ""  # huggingface_hub version in the fetch virtualenv
    gate: dict = field(default_factory=dict)  # gate.json: {"release", "result": running|passed|failed, "at", ...}
    current_release: dict = field(default_factory=dict)  # current/release.json (what the host serves: config hash, models, image)
    job: tuple[str, str, str] | None = None  # the host's active job: (id, unit state, key)
    default_runtime: str = ""  # docker's default runtime (DGX OS 7 sets nvidia)
    docker_security: str = ""  # docker info SecurityOptions (JSON), e.g. ["name=apparmor","name=seccomp,profile=default"]
    docker_root: str = ""  # docker's root dir (DockerRootDir); "" if unknown
    docker_root_free: int = 0  # free bytes under docker_root
    docker_root_same_fs: bool | None = None  # docker_root on the same filesystem as data_dir (None: unknown)
    gpu_hook: str | None = None  # path of nvidia-container-runtime-hook ("": missing, None: not reported)
    apparmor: tuple[str, str, str] | None = None  # (kernel AppArmor enabled Y/N, docker-default loaded count, apparmor_parser path)
    dpkg_busy: list[str] = field(default_factory=list)  # running apt/dpkg/unattended-upgrades processes (they hold the dpkg lock)
    validated: list[str] = field(default_factory=list)  # in-image validation verdicts for the config hash (validate_in_image)

    def gate_passed(self, release: str) -> bool:
        return self.gate.get("release") == release and self.gate.get("result") == "passed"


class SpecfleetHost(FactBase):
    """Status of a specfleet host: docker, port, unit, current release, free disk, image, file sizes/hashes."""

    @staticmethod
    def default() -> HostStatus:
        return HostStatus()

    def command(self, data_dir, service, port, image, sizes=(), files=(), users=(), config_key=""):
        env = {
            "DATA": data_dir, "SVC": service, "PORT": str(port), "IMAGE": image,
            "CFG": config_key or "-none-",  # validate_in_image.config_key of the release's config
            "SIZES": "\n".join(sizes),
            "FILES": "\n".join(files),
            "USERS": "\n".join(users),
        }
        # One path per line (Hub file names may hold spaces; the controller refuses control characters).
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"{assigns}; export DATA SVC PORT IMAGE CFG; {_SCRIPT}"

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
            elif key == "listen":
                st.listeners = int(rest or 0)
            elif key == "free":
                st.free_bytes = int(rest) if rest.isdigit() else 0
            elif key == "container":
                st.container_running = rest == "true"
            elif key == "image":
                st.image_id = rest
            elif key in ("gate", "current_release"):
                try:
                    value = json.loads(rest) if rest else {}
                except ValueError:
                    value = {}
                setattr(st, key, value if isinstance(value, dict) else {})
            elif key == "job":
                jid, _, more = rest.partition("\t")
                unit, _, jkey = more.partition("\t")
                st.job = (jid, unit, jkey) if unit in ("active", "activating") else None
            elif key == "releases":
                st.releases = rest.split()
            elif key == "docker_root":
                free, _, more = rest.partition("\t")
                same, _, path = more.partition("\t")
                st.docker_root, st.docker_root_free = path, int(free) if free.isdigit() else 0
                st.docker_root_same_fs = {"same": True, "other": False}.get(same)
            elif key == "gpu_hook":
                st.gpu_hook = rest
            elif key == "apparmor":
                enabled, loaded, parser = (rest.split("\t") + ["", "", ""])[:3]
                st.apparmor = (enabled, loaded, parser)
            elif key == "dpkg_busy":
                st.dpkg_busy = rest.split()
            elif key == "validated":
                st.validated = rest.split()
            elif key in ("default_runtime", "docker_security"):
                setattr(st, key, rest)
            elif key in ("arch", "os", "docker", "runtimes", "active", "enabled", "current", "previous", "lock",
                         "unit_sha256", "hub_client"):
                setattr(st, key, rest)
        return st


class ReleaseStatus(FactBase):
    """`specfleet-host status` as JSON: current/previous release, releases, unit state, gate, job ({} if absent)."""

    def command(self, data_dir):
        return f"{data_dir}/bin/specfleet-host --data-dir {data_dir} status 2>/dev/null || echo '{{}}'"

    def process(self, output):
        try:
            return json.loads("\n".join(output))
        except ValueError:
            return {}
