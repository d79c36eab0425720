"""The files unified-memory care writes on a serving Spark, rendered from the settings: earlyoom's drop-in (its floor
and the processes it avoids) and dockerd's OOM score from its next start. The container's own cap is part of the
serving unit (serving/render.memory_cap_args).
"""

from __future__ import annotations

from ..constants import GB
from ..fleet.settings import Settings
from ..fleet.templating import ENV
from ..host.layout import EARLYOOM_BIN
from .rules import earlyoom_floor_gb

# dockerd comes last, as Docker's packaging puts containerd (-999: chosen only when nothing else can be; not -1000,
# which its children would inherit, making them unkillable). Debian's docker.io leaves dockerd at 0.
DOCKERD_OOM_SCORE_ADJ = -999
# earlyoom's options as v1.7 documents them (rfjakob/earlyoom README; the version Debian 12 and Ubuntu 24.04 package;
# checked with Debian's 1.7-1+b1 binary): `-M SIZE[,KILL_SIZE]` in KiB, `-s` swap percent (memory AND swap must be
# low for it to act), `--avoid REGEX` matched against /proc/PID/comm.
# earlyoom never picks these (matched against /proc/PID/comm): the box's init, its SSH listener, docker's daemons. A
# backstop: their oom_score is already the lowest (sshd -1000, dockerd -999), and earlyoom takes the highest.
EARLYOOM_AVOID = "^(init|systemd|sshd|dockerd|containerd)$"


def earlyoom_kib(s: Settings) -> tuple[int, int]:
    """earlyoom's `-M SIZE,KILL_SIZE` in KiB: both its floor of MemAvailable, so that it sends SIGKILL at once. A
    SIGTERM is a graceful shutdown that exits 0 (uvicorn's, which trtllm-serve serves with: not checked on the NGC
    image; the stand-in does the same), which the unit's Restart=on-failure takes for a stop: the host would serve
    nothing. And a graceful shutdown holds the memory while the box runs out."""
    floor = int(earlyoom_floor_gb(s) * GB) // 1024
    return floor, floor


def earlyoom_dropin(s: Settings) -> str:
    """earlyoom.service's drop-in on a serving Spark: its own command line, thresholds and the processes it avoids
    (systemd expands `$` in ExecStart: written `$$`)."""
    term, kill = earlyoom_kib(s)
    return ENV.get_template("earlyoom.conf.j2").render(binary=EARLYOOM_BIN, term_kib=term, kill_kib=kill,
                                                      avoid=EARLYOOM_AVOID.replace("$", "$$"))


def dockerd_oom_dropin() -> str:
    """docker.service's drop-in for a serving Spark: dockerd's OOM score from its next start (the deploy sets the
    running dockerd's at once: no docker restart, which would stop the serving container)."""
    return ENV.get_template("dockerd-oom.conf.j2").render(score=DOCKERD_OOM_SCORE_ADJ)
