"""One read-only fact with everything the converge decides on, gathered in a single remote command
(one SSH round trip per host: re-runs stay fast)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

_SCRIPT = r"""
echo "arch	$(uname -m)"
( . /etc/os-release 2>/dev/null; echo "os	${PRETTY_NAME:-unknown}" )
if out=$(docker info --format '{{json .Runtimes}}' 2>&1); then echo "docker	ok"; echo "runtimes	$out";
else echo "docker	$(printf '%s' "$out" | tail -n 1)"; fi
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
echo "image	$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null)"
for f in $SIZES; do s=$(stat -L -c %s "$f" 2>/dev/null || echo -1); echo "size	$s	$f"; done
for f in $HASHES; do h=$(sha256sum "$f" 2>/dev/null | cut -d' ' -f1); echo "sha256	${h:-none}	$f"; done
for f in $EXISTS; do [ -e "$f" ] && echo "exists	$f"; done
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
    sha256: dict[str, str] = field(default_factory=dict)
    exists: set[str] = field(default_factory=set)


class SpecfleetHost(FactBase):
    """Status of a specfleet host: docker, port, unit, current release, free disk, image, file sizes/hashes."""

    @staticmethod
    def default() -> HostStatus:
        return HostStatus()

    def command(self, data_dir, service, port, image, sizes=(), hashes=(), exists=()):
        env = {
            "DATA": data_dir, "SVC": service, "PORT": str(port), "IMAGE": image,
            "SIZES": " ".join(shlex.quote(p) for p in sizes),
            "HASHES": " ".join(shlex.quote(p) for p in hashes),
            "EXISTS": " ".join(shlex.quote(p) for p in exists),
        }
        # Paths are validated (no spaces/quotes), so word-splitting the lists is safe.
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        return f"{assigns}; export DATA SVC PORT IMAGE; {_SCRIPT}"

    def process(self, output):
        st = HostStatus()
        for line in output:
            key, _, rest = line.partition("\t")
            if key == "size":
                size, _, path = rest.partition("\t")
                st.sizes[path] = int(size) if size.lstrip("-").isdigit() else -1
            elif key == "sha256":
                digest, _, path = rest.partition("\t")
                st.sha256[path] = "" if digest == "none" else digest
            elif key == "exists":
                st.exists.add(rest)
            elif key == "listen":
                st.listeners = int(rest or 0)
            elif key == "free":
                st.free_bytes = int(rest) if rest.isdigit() else 0
            elif key == "container":
                st.container_running = rest == "true"
            elif key == "image":
                st.image_id = rest
            elif key == "releases":
                st.releases = rest.split()
            elif key in ("arch", "os", "docker", "runtimes", "active", "enabled", "current", "previous", "lock",
                         "unit_sha256"):
                setattr(st, key, rest)
        return st
