"""`specfleet bench`: measure speculative-decoding variants in parallel on bench hosts.

A variant is a profile plus overrides (`baseline`, `eagle3:max_draft_len=1,2,3`,
`vllm_eagle3:num_speculative_tokens=3,7`: one variant per value; the key is the profile's engine's count of drafted
tokens, engines/catalog.py). Each variant is a release staged and switched on a bench host with the rollout machinery
(stage, switch behind the readiness gate); the variants are spread over the hosts of `--limit` (default: the
`bench` group), one per host per round. The load runs ON each host (the server binds 127.0.0.1) with the
stdlib client `specfleet/bench/host/bench_load.py`, which streams completions and reads the engine's acceptance
(its Prometheus counters before and after the window, or trtllm-serve's iteration stats, drained during it; every
bench release adds its engine's `bench_options`: the counters' source on, prefix caching off). Every host returns to
the release it served before, also when interrupted or when a variant fails its gate.

This module is the pure part: variants, prompts, the arithmetic (summaries, acceptance, speed-up; unit-tested in
tests/unit/test_bench*.py), the table and plot. The fleet-file rewrite of --apply: bench/apply.py; the run on the hosts:
bench/run.py; the command: cli/bench.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines.catalog import Engine, draft_len, engine_of, speculative
from ..fleet.inventory import Inventory
from ..fleet.profiles import nodes, profiles
from ..overview.host.overview import counter_window, iteration_window, window_samples
from ..plan import HostPlan, build_plans
from ..serving.options import deep_merge

DEFAULT_GROUP = "bench"
LOAD_TOOL = "specfleet-bench-load"



# ---- variants ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str  # e.g. "eagle3:max_draft_len=2"
    profile: str
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)  # overrides of the options var
    params: tuple[tuple[str, int], ...] = ()  # (("max_draft_len", 2),)

    @property
    def engine(self) -> str:
        return engine_of(profiles()[self.profile]).name

    @property
    def options_var(self) -> str:
        return engine_of(profiles()[self.profile]).options_var

    @property
    def draft_len(self) -> int:
        """Tokens drafted per step (0: no speculation): the swept value, else the profile's."""
        return next((v for _, v in self.params), None) or draft_len(profiles()[self.profile])


def parse_variants(specs: list[str] | tuple[str, ...]) -> list[Variant]:
    """`baseline`, `eagle3`, `eagle3:max_draft_len=1,2,3` (one variant per value). Several specs may share one
    argument, separated by spaces. Raises ValueError with one line on bad input."""
    items = [item for spec in specs for item in spec.split()]
    if not items:
        raise ValueError("--variants: give at least one variant, e.g. --variants 'baseline eagle3:max_draft_len=1,2,3'")
    out: list[Variant] = []
    for item in items:
        profile, _, rest = item.partition(":")
        single = sorted(p for p in profiles() if nodes(p) == 1)  # bench variants run on single Sparks
        if profile not in single:
            what = "a two-Spark profile" if profile in profiles() else "unknown profile"
            raise ValueError(f"--variants: '{item}': {what} '{profile}' (allowed: {', '.join(single)})")
        if not rest:
            if ":" in item:
                raise ValueError(f"--variants: '{item}': nothing after ':' (e.g. {profile}:max_draft_len=1,2)")
            out.append(Variant(profile, profile))
            continue
        out += _swept(item, profile, rest)
    seen: set[str] = set()
    for v in out:
        if v.name in seen:
            raise ValueError(f"--variants: '{v.name}' is given twice")
        seen.add(v.name)
    return out


def _swept(item: str, profile: str, rest: str) -> list[Variant]:
    """The variants of one `PROFILE:KEY=V1,V2` item (`rest` is what follows the ':'), one per value."""
    key, eq, values = rest.partition("=")
    if not eq or not key:
        raise ValueError(f"--variants: '{item}': expected PROFILE:KEY=V1,V2 (e.g. eagle3:max_draft_len=1,2,3)")
    allowed = engine_of(profiles()[profile]).draft_len
    if key != allowed:
        raise ValueError(f"--variants: '{item}': unknown key '{key}' (allowed: {allowed})")
    if not speculative(profiles()[profile]):
        raise ValueError(f"--variants: '{item}': profile {profile} has no speculation, so no {key}")
    out = []
    for raw in values.split(","):
        if not re.fullmatch(r"[1-9][0-9]{0,2}", raw.strip()):
            raise ValueError(f"--variants: '{item}': {key} value '{raw}' is not an integer in 1..999")
        value = int(raw)
        out.append(Variant(f"{profile}:{key}={value}", profile, {"speculative_config": {key: value}}, ((key, value),)))
    return out


def assign_rounds(variants: list[Variant], hosts: list[str]) -> list[list[tuple[str, Variant]]]:
    """Rounds of (host, variant): one variant per host per round, in order."""
    return [list(zip(hosts, variants[i:i + len(hosts)], strict=False)) for i in range(0, len(variants), len(hosts))]


# ---- prompts (deterministic, documented in docs/status-and-bench.md) -----------------------------------------------
_CORPUS = (
    "The river rose through the night and by morning the lower fields were under water.",
    "A compiler translates a program written in one language into another, usually lower level, language.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "The committee postponed its decision until the budget figures for the next year were available.",
    "In distributed systems a consensus protocol lets replicas agree on a single value despite failures.",
    "She measured the angle twice, adjusted the tripod and took the photograph just before sunset.",
    "Interest rates affect borrowing costs, which in turn influence investment and consumer spending.",
    "The museum's new wing displays tools, pottery and textiles from several ancient settlements.",
    "Caching trades memory for latency by keeping recently used results close to where they are needed.",
    "After the storm the volunteers cleared the trails, repaired two bridges and counted the fallen trees.",
    "A balanced diet includes vegetables, whole grains, proteins and a moderate amount of healthy fats.",
    "The orchestra rehearsed the second movement slowly, then again at the tempo the composer marked.",
)
_TASKS = (
    "Summarize the following text in three sentences.",
    "List the main ideas of the following text as bullet points.",
    "Explain the following text to a twelve-year-old.",
    "Write a short title and a one-paragraph abstract for the following text.",
)
BUCKETS = {"short": 24, "medium": 256, "long": 1024}  # prompt length in words (the stand-in counts words as tokens)


def prompt_set(buckets: dict[str, int] | None = None, per_bucket: int = 8) -> dict[str, list[str]]:
    """Deterministic prompts: task i + corpus sentences taken in a rotating order until the bucket's word count."""
    out: dict[str, list[str]] = {}
    for b, words in (buckets or BUCKETS).items():
        prompts = []
        for i in range(per_bucket):
            text = _TASKS[i % len(_TASKS)].split()
            j = i * 5
            while len(text) < words:
                text += _CORPUS[j % len(_CORPUS)].split()
                j += 7
            prompts.append(" ".join(text[:words]))
        out[b] = prompts
    return out


# ---- arithmetic (pure) ------------------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None for no values."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize_bucket(raw: dict[str, Any]) -> dict[str, Any]:
    """The figures of one variant x bucket from the load client's raw result."""
    reqs = [r for r in raw.get("requests", []) if not r.get("error")]
    errors = [r["error"] for r in raw.get("requests", []) if r.get("error")]
    itl = [g for r in reqs for g in r.get("itl_s", [])]
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) for r in reqs
            if r.get("ttft_s") is not None and r.get("output_tokens", 0) > 1]
    out_tokens = sum(r.get("output_tokens", 0) for r in reqs)
    wall = raw.get("wall_s") or 0.0
    mem = dict(raw.get("mem_peak") or {})
    acc = _acceptance(raw)
    if acc.get("gpu_mem_peak_bytes"):
        mem.setdefault("gpu_bytes", acc["gpu_mem_peak_bytes"])
    return {
        "requests": len(reqs), "errors": errors, "output_tokens": out_tokens, "wall_s": wall,
        "tokens_per_s": out_tokens / wall if wall > 0 and reqs else None,  # output throughput of the bucket
        "ttft_s": {"mean": _mean([r["ttft_s"] for r in reqs]),
                   **{f"p{q}": percentile([r["ttft_s"] for r in reqs], q) for q in (50, 90, 99)}},
        "itl_s": {"mean": _mean(itl), **{f"p{q}": percentile(itl, q) for q in (50, 90, 99)}},
        "tpot_s": {"mean": _mean(tpot)},
        "latency_s": {"p50": percentile([r["e2e_s"] for r in reqs], 50),
                      "p90": percentile([r["e2e_s"] for r in reqs], 90)},
        "acceptance_length": acc.get("acceptance_length"), "acceptance_rate": acc.get("acceptance_rate"),
        "spec": acc, "mem_peak": mem,
    }


def _acceptance(raw: dict[str, Any]) -> dict[str, Any]:
    """The window's acceptance: the deltas of the engine's counters (the load client's `counters` before and after),
    else trtllm-serve's iteration stats drained during it; `source` says which. {"error": why, ...} when the window is
    not one server's and only the window's (overview/host/overview.py: counter_window, iteration_window)."""
    counters = raw.get("counters")
    if counters:
        acc = counter_window(counters["before"], counters["after"], counters["names"], raw.get("wall_s"))
        return {**acc, "source": "counters"}
    return {**iteration_window(raw.get("drain") or {}, raw.get("iterations") or []), "source": "iteration stats"}


def load_counters(engine: Engine) -> dict[str, Any]:
    """What the load client is told of the engine's counters: the record's format, path and names, and for counters
    a read does not consume, the samples each read keeps (the counters, their `_created`, the process start)."""
    record = engine.counters.record()
    return {**record, "samples": window_samples(record["names"])} if engine.counters.scrapable else record


def _mean(xs: list[float | None]) -> float | None:
    given = [x for x in xs if x is not None]
    return sum(given) / len(given) if given else None


def add_speedups(results: list[dict[str, Any]]) -> None:
    """speedup = tokens/s / its engine's baseline's (a variant that drafts nothing) tokens/s for the same bucket on the
    same host class (arch + GPU). Engines are compared with each other by their tokens/s."""
    base: dict[tuple[str, str, str], float] = {}
    for r in results:
        if not r["draft_len"] and r.get("buckets"):
            for b, fig in r["buckets"].items():
                if fig.get("tokens_per_s"):
                    base.setdefault((r["engine"], r["host_class"], b), fig["tokens_per_s"])
    for r in results:
        for b, fig in (r.get("buckets") or {}).items():
            ref = base.get((r["engine"], r["host_class"], b))
            fig["speedup"] = fig["tokens_per_s"] / ref if ref and fig.get("tokens_per_s") else None


def host_class(env: dict[str, Any]) -> str:
    return f"{env.get('arch', '?')}/{env.get('gpu') or 'no GPU'}"


def best_variant(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The speculative variant with the highest mean speed-up over the buckets (it must beat baseline)."""
    scored = []
    for r in results:
        ups = [f["speedup"] for f in (r.get("buckets") or {}).values() if f.get("speedup")]
        if r["draft_len"] and ups and not r.get("error"):
            scored.append((sum(ups) / len(ups), r))
    scored.sort(key=lambda x: -x[0])
    return scored[0][1] if scored and scored[0][0] > 1.0 else None


# ---- output -------------------------------------------------------------------------------------------------
def _f(x: float | None, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if x is None else fmt.format(x)


def table(results: list[dict[str, Any]]) -> list[str]:
    """One row per variant x host x bucket: throughput, speed-up against its engine's baseline, the servers'
    acceptance, TTFT and ITL (p50 and p99) and latency."""
    rows = [("variant", "engine", "host", "bucket", "tokens/s", "speedup", "acc.len", "acc.rate", "TTFT p50",
             "TTFT p99", "ITL p50", "ITL p99", "lat p50", "lat p90")]
    for r in results:
        if r.get("error") or not r.get("buckets"):
            rows.append((r["variant"], r.get("engine", "-"), r["host"], *["-"] * 10, r.get("error") or "no data"))
            continue
        for b, f in r["buckets"].items():
            rows.append((r["variant"], r.get("engine", "-"), r["host"], b, _f(f["tokens_per_s"], "{:.1f}"),
                         _f(f.get("speedup"), "{:.2f}x"), _f(f["acceptance_length"]), _f(f["acceptance_rate"]),
                         _f(f["ttft_s"]["p50"], "{:.3f}s"), _f(f["ttft_s"].get("p99"), "{:.3f}s"),
                         _f(f["itl_s"]["p50"], "{:.4f}s"), _f(f["itl_s"].get("p99"), "{:.4f}s"),
                         _f(f["latency_s"]["p50"], "{:.2f}s"), _f(f["latency_s"]["p90"], "{:.2f}s")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def plot(results: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Speed-up and acceptance length vs tokens drafted per step, one line per (engine, profile, bucket): the engine
    is a dimension of the plot (its line style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    series: dict[tuple[str, str, str], list[tuple[int, float | None, float | None]]] = {}
    for r in results:
        for b, f in (r.get("buckets") or {}).items():
            if not r["draft_len"]:
                continue
            series.setdefault((r["engine"], r["profile"], b), []).append(
                (r["draft_len"], f.get("speedup"), f.get("acceptance_length")))
    styles = {e: s for e, s in zip(sorted({k[0] for k in series}), ("-", "--", ":", "-."), strict=False)}
    for (engine, profile, b), pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        for ax, i in ((ax1, 1), (ax2, 2)):
            ax.plot(xs, [p[i] if p[i] is not None else float("nan") for p in pts], marker="o",
                    linestyle=styles[engine], label=f"{engine}: {profile} {b}")
    ax1.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax1.scatter([0], [1.0], marker="*", s=160, color="black", zorder=5, label="baseline (1.0x)")
    ax2.scatter([0], [1.0], marker="*", s=160, color="black", zorder=5, label="baseline (1 token/iter)")
    ax1.set(xlabel="tokens drafted per step", ylabel="speed-up vs its engine's baseline (output tokens/s)",
            title="Speed-up")
    ax2.set(xlabel="tokens drafted per step", ylabel="acceptance length (tokens/step)", title="Acceptance length")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---- plans, results, outputs, the fleet-file rewrite ---------------------------------------------------------
def variant_plans(inventory: Inventory, hosts_variants: list[tuple[str, Variant]],
                  keep_extra: int) -> dict[str, HostPlan]:
    """Per host, the plan of its variant: the host's vars + the variant's overrides of its engine's options var
    (deep-merged over the host's own) + the engine's bench_options; keep_releases raised so the release served
    before is never pruned."""
    plans: dict[str, HostPlan] = {}
    by_profile: dict[str, list[tuple[str, Variant]]] = {}
    for h, v in hosts_variants:
        by_profile.setdefault(v.name, []).append((h, v))
    for _, pairs in by_profile.items():
        v = pairs[0][1]
        bench_options = engine_of(profiles()[v.profile]).bench_options
        hvars = {}
        for h, _ in pairs:
            base = copy.deepcopy(inventory.host_vars[h])
            base[v.options_var] = deep_merge(deep_merge(base.get(v.options_var) or {}, copy.deepcopy(v.options)),
                                             copy.deepcopy(bench_options))
            base["keep_releases"] = int(base.get("keep_releases", 5)) + keep_extra
            hvars[h] = base
        inv = dataclasses.replace(inventory, hosts=[h for h, _ in pairs], host_vars=hvars,
                                  groups={g: [h for h in m if h in hvars] for g, m in inventory.groups.items()})
        plans.update(build_plans(inv, v.profile, resolve=True))
    return plans


def serve_url(plan: HostPlan) -> str:
    url: str = plan.release_record("")["url"]
    return url


def variant_result(v: Variant, h: str, plan: HostPlan | None, raw: dict[str, Any] | None = None,
                   error: str | None = None) -> dict[str, Any]:
    env = (raw or {}).get("env") or {}
    out: dict[str, Any] = {"variant": v.name, "profile": v.profile, "engine": v.engine, "params": dict(v.params),
           "draft_len": v.draft_len, "overrides": {v.options_var: v.options} if v.options else {}, "host": h,
           "error": error,
           "release": plan.release_id if plan else None,
           "image": plan.settings.image if plan else None, "image_digest": plan.image_digest if plan else None,
           "models": {role: {"repo": p.repo, "commit": p.commit} for role, p in (plan.pins.items() if plan else [])},
           "env": env, "host_class": host_class(env), "buckets": {}, "raw": raw}
    if raw:
        out["buckets"] = {b: summarize_bucket(r) for b, r in raw.get("buckets", {}).items()}
        unusable = [f"{b}: {f['spec']['error']}" for b, f in out["buckets"].items() if f["spec"].get("error")]
        if unusable and not error:  # a window that is not the variant's alone: nothing of the variant is counted
            out.update(error=unusable[0], buckets={})
    return out


def parse_buckets(spec: str) -> list[str]:
    """`--buckets short,medium`: the prompt-length buckets to run (ValueError with one line on bad input)."""
    wanted = [b.strip() for b in spec.split(",") if b.strip()]
    if [b for b in wanted if b not in BUCKETS] or not wanted:
        raise ValueError(f"--buckets: '{spec}': allowed: {', '.join(BUCKETS)}")
    return wanted


def write_outputs(out_path: Path, bench_id: str, settings: dict[str, Any], prompts: dict[str, Any],
                  results: list[dict[str, Any]]) -> tuple[Path, Path, bool]:
    """bench.json and bench.png in `out_path` (speed-ups added to `results`); returns their paths and whether the
    figures come from a stand-in server (its image name contains 'standin')."""
    add_speedups(results)
    standin = any("standin" in (r.get("image") or "").lower() for r in results)
    doc = {"bench_id": bench_id, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "standin": standin,
           "settings": settings, "prompts": prompts, "results": results}
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    title = f"specfleet bench {bench_id}" + (" -- STAND-IN, SYNTHETIC figures (not an engine on a GPU)" if standin
                                              else "")
    return out_path / "bench.json", plot(results, out_path / "bench.png", title), standin
