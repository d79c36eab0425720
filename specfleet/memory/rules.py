"""Whether a profile fits a Spark's unified memory (pure: settings + the lock's pins + the host's MemTotal).

On a GB10 the CPU and GPU share one pool (../shared/reference/spark-memory.md), and a box that runs out of it can
freeze or hard-reset instead of killing one process. So the preflight refuses, before any download or restart, a
profile whose weights (the lock's exact bytes of the files the server loads, target + draft) plus an overhead
(`memory_overhead_fraction` of them: CUDA context, runtime, CUDA graphs, activations, a minimal KV cache; an
estimate, not an upstream figure) would not leave `memory_reserve_gb` of MemTotal. The KV cache beyond that is not
counted: TensorRT-LLM sizes it from what is free at load time (free_gpu_memory_fraction), which is why the unit drops
the page cache before every start.

A two-Spark pair (tensor parallel, TP=2) splits the target's weights over its two nodes. Each node's share is taken as
half the target plus the whole draft (the EAGLE-3 head): a guess, labelled as one, and the stricter reading (whether
TensorRT-LLM shards the draft too was not established from upstream)."""

from __future__ import annotations

from dataclasses import dataclass

from ..constants import GB
from ..engines.catalog import memory_fraction
from ..fleet.settings import Settings
from ..pins.models import ModelPin


def reserve_kb(reserve: int) -> int:
    """THE reserve as the container's cap subtracts it: whole kB, the unit drop-caches works in (/proc/meminfo's)."""
    return reserve // 1024


def earlyoom_floor_gb(settings: Settings) -> float:
    """earlyoom's floor (memory/steps.py): earlyoom_available_gb, or a quarter of memory_reserve_gb (0: left alone)."""
    given = settings.earlyoom_available_gb
    return settings.memory_reserve_gb / 4 if given is None else given


@dataclass(frozen=True)
class Fit:
    profile: str
    need: int  # bytes one node needs: its share of the weights + the overhead
    weights: int  # bytes of this node's share of the weights
    reserve: int  # bytes that must stay available (memory_reserve_gb)
    pair: bool  # a pair node's share
    # the share of MemTotal the engine is told it may take (vLLM's --gpu-memory-utilization, from
    # vllm_gpu_memory_utilization; None: the engine sizes from what is free at load)
    share: float | None = None
    share_var: str = ""  # the var that sets it

    def problem(self, mem_total: int) -> str | None:
        """THE memory refusal (`memory: ...` or `<share var>: ...`, after `HOST: `), or None when it fits. mem_total 0:
        not reported. With a share: the share must leave the reserve, and the weights must fit in it."""
        if mem_total <= 0:
            return None
        if self.share is not None and self.share * mem_total > mem_total - self.reserve:
            most = int((mem_total - self.reserve) / mem_total * 1000) / 1000
            return (f"{self.share_var}: {self.share:g} of MemTotal {mem_total / GB:.1f} GB would leave "
                    f"{(1 - self.share) * mem_total / GB:.1f} GB, under memory_reserve_gb {self.reserve / GB:g} "
                    f"(allowed: at most {most:g} on this host)")
        if self.need <= self.budget(mem_total):
            return None
        return f"memory: {self.line(mem_total)}"

    def budget(self, mem_total: int) -> float:
        """Bytes the server may take: MemTotal less the reserve, or its share of MemTotal when it is told one."""
        return mem_total * self.share if self.share is not None else mem_total - self.reserve

    def line(self, mem_total: int) -> str:
        """`<profile> needs ~X GB, host has Y GB (reserve Z GB)` and, with a share, what the engine may take: what
        `plan` shows and the refusal says."""
        share = " per node of the pair" if self.pair else ""
        has = f"{mem_total / GB:.1f} GB" if mem_total > 0 else "an unknown amount"
        told = ""
        if self.share is not None:
            told = f", {self.share_var} {self.share:g}" + (
                f" = {mem_total * self.share / GB:.1f} GB for the server" if mem_total > 0 else " of it for the server")
        return (f"{self.profile} needs ~{self.need / GB:.1f} GB{share}, host has {has} "
                f"(reserve {self.reserve / GB:g} GB{told})")

    def cap(self, mem_total: int) -> int:
        """The container's memory cap in bytes: MemTotal less the reserve, as the unit's drop-caches computes it in kB
        before each start (render.memory_cap_args)."""
        return mem_total - reserve_kb(self.reserve) * 1024

    def plan_line(self, mem_total: int, mem_available: int) -> str:
        """`plan`'s figure: `line`, the container's cap, and what is available now (page cache and other processes
        take the rest, until the unit's drop-caches before the start)."""
        cap = f"; container capped at {self.cap(mem_total) / GB:.1f} GB" if mem_total > 0 else ""
        now = f"; {mem_available / GB:.1f} GB available now" if mem_available > 0 else ""
        return self.line(mem_total) + cap + now


def fit(settings: Settings, pins: dict[str, ModelPin]) -> Fit | None:
    """What one host needs for its profile's models (None: a profile-less deploy). `pins`: role -> hub.ModelPin."""
    if settings.profile is None or settings.profile_name is None:
        return None
    target = pins["target"].size if "target" in pins else 0
    draft = pins["draft"].size if "draft" in pins else 0
    pair = settings.pair_role is not None
    weights = (target + 1) // 2 + draft if pair else target + draft
    overhead = int(weights * settings.memory_overhead_fraction)
    return Fit(settings.profile_name, weights + overhead, weights, int(settings.memory_reserve_gb * GB), pair,
               memory_fraction(settings), settings.engine.memory_fraction_var)


CAP_SYS_RESOURCE = 24  # linux/capability.h: a score below 0 (OOMScoreAdjust=, /proc/PID/oom_score_adj) needs it


def can_lower_scores(cap_bnd: str) -> bool:
    """Whether a process on a host may get a negative OOM score, from the host's capability bounding set (hex, as
    /proc/PID/status has it; "": unknown, taken as yes): CAP_SYS_RESOURCE is in it on a Spark; a container without it
    cannot lower a score, and systemd then leaves OOMScoreAdjust=-999 at 0."""
    return not cap_bnd or bool(int(cap_bnd, 16) >> CAP_SYS_RESOURCE & 1)
