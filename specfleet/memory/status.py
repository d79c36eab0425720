"""The memory part of a Spark's one status read (MEMORY, `status.memory`): the unified memory's size and what is
available, dockerd's OOM score, the capability bounding set and earlyoom, with the drop-ins a converge manages for
them (memory/steps.py). Its fragment is memory/host/memory_status.sh; fleet/status.py composes it into the one read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..fleet.programs import program_text
from ..fleet.status import FileReads, Lines, StatusPart, Want, register, sha256
from ..host.layout import DOCKER_UNIT, EARLYOOM_BIN, EARLYOOM_UNIT, main_pid
from ..plan import HostPlan
from .render import dockerd_oom_dropin, earlyoom_dropin
from .rules import earlyoom_floor_gb


@dataclass
class Memory:
    mem_total: int = 0  # bytes of memory (/proc/meminfo MemTotal: a GB10's one pool for CPU and GPU); 0 unknown
    mem_available: int = 0  # bytes available now (MemAvailable)
    dockerd_oom: int | None = None  # the running dockerd's oom_score_adj (None: no dockerd found)
    cap_bnd: str = ""  # the host's capability bounding set, hex (/proc/self/status CapBnd; "": not read)
    # earlyoom: its binary ("": not installed), its unit's ActiveState and UnitFileState ("enabled", "disabled", ...)
    earlyoom: tuple[str, str, str] = ("", "", "")


def _kib_pair(text: str) -> tuple[int, int]:
    """The probe's `mem` line (MemTotal and MemAvailable in kB, as /proc/meminfo gives them) in bytes; 0 unknown."""
    values = [int(v) * 1024 if v.isdigit() else 0 for v in text.split()] + [0, 0]
    return values[0], values[1]


def parse_memory(lines: Lines) -> Memory:
    st = Memory()
    for key, rest in lines:
        if key == "mem":
            st.mem_total, st.mem_available = _kib_pair(rest)
        elif key == "dockerd_oom":
            st.dockerd_oom = int(rest) if re.fullmatch(r"-?[0-9]+", rest) else None
        elif key == "cap_bnd":
            st.cap_bnd = rest
        elif key == "earlyoom":  # three tab-separated fields, each possibly empty
            binary, state, unit_file = (rest.split("\t") + ["", ""])[:3]
            st.earlyoom = (binary, state, unit_file)
    return st


def _env(plan: HostPlan) -> dict[str, str]:
    return {"DOCKERD_PID": main_pid(DOCKER_UNIT), "EARLYOOM_BIN": EARLYOOM_BIN, "EARLYOOM_UNIT": EARLYOOM_UNIT}


def _reads(plan: HostPlan) -> FileReads:
    """What memory/steps.py left, on any host: the cleanup removes it; the marker says what it did."""
    lay = plan.paths
    return FileReads(files=(lay.dockerd_oom_dropin, lay.earlyoom_dropin, lay.earlyoom_marker))


def _wanted(plan: HostPlan) -> dict[str, Want]:
    """A serving Spark: dockerd comes last under memory pressure, and earlyoom's command line (memory/steps.py)."""
    s, lay = plan.settings, plan.paths
    if s.profile is None or plan.is_mirror:
        return {}
    want = {lay.dockerd_oom_dropin: Want("file", "644", sha256=sha256(dockerd_oom_dropin()))}
    if earlyoom_floor_gb(s) > 0:
        want[lay.earlyoom_dropin] = Want("file", "644", sha256=sha256(earlyoom_dropin(s)))
    return want


MEMORY = register(StatusPart(
    "memory", frozenset({"mem", "dockerd_oom", "cap_bnd", "earlyoom"}), parse_memory,
    script=program_text("memory_status.sh"),
    env=_env, reads=_reads, wanted=_wanted))
