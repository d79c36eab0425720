"""`specfleet bench`: measure speculative-decoding variants in parallel on bench hosts.

A variant is a profile plus overrides (`baseline`, `eagle3:max_draft_len=1,2,3`, `draft_target:max_draft_len=2,4`:
one variant per value). Each variant is a release staged and switched on a bench host with the rollout machinery
(stage, switch behind the readiness gate); the variants are spread over the hosts of `--limit` (default: the
`bench` group), one per host per round. The load runs ON each host (trtllm-serve binds 127.0.0.1) with the
stdlib client `specfleet/host/bench_load.py`, which streams completions and drains `/metrics` (iteration stats;
every bench release sets `enable_iter_perf_stats: true`). Every host returns to the release it served before,
also when interrupted or when a variant fails its gate.

The arithmetic (summaries, acceptance, speed-up) is pure and unit-tested (tests/unit/test_bench*.py)."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import click

from .plan import EXIT_INVALID, HostPlan, PlanError, build_plans, load_inventory_or_fail
from .profiles import PROFILES
from .project import use_project

EXIT_OK, EXIT_FAILED = 0, 1
DEFAULT_GROUP = "bench"
LOAD_TOOL = "specfleet-bench-load"

# variant keys -> where they go in extra_llm_api_options
VARIANT_KEYS = {"max_draft_len": ("speculative_config", "max_draft_len")}


# ---- variants ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Variant:
    name: str  # e.g. "eagle3:max_draft_len=2"
    profile: str
    options: dict = field(default_factory=dict, hash=False, compare=False)  # extra_llm_api_options overrides
    params: tuple = ()  # (("max_draft_len", 2),)

    @property
    def max_draft_len(self) -> int | None:
        if self.profile == "baseline":
            return 0
        value = dict(self.params).get("max_draft_len")
        if value is not None:
            return value
        return PROFILES[self.profile]["llm_api_options"].get("speculative_config", {}).get("max_draft_len")


def parse_variants(specs: list[str] | tuple[str, ...]) -> list[Variant]:
    """`baseline`, `eagle3`, `eagle3:max_draft_len=1,2,3` (one variant per value). Several specs may share one
    argument, separated by spaces. Raises ValueError with one line on bad input."""
    items = [item for spec in specs for item in spec.split()]
    if not items:
        raise ValueError("--variants: give at least one variant, e.g. --variants 'baseline eagle3:max_draft_len=1,2,3'")
    out: list[Variant] = []
    for item in items:
        profile, _, rest = item.partition(":")
        if profile not in PROFILES:
            raise ValueError(f"--variants: '{item}': unknown profile '{profile}' (allowed: {', '.join(sorted(PROFILES))})")
        if not rest:
            if ":" in item:
                raise ValueError(f"--variants: '{item}': nothing after ':' (e.g. {profile}:max_draft_len=1,2)")
            out.append(Variant(profile, profile))
            continue
        key, eq, values = rest.partition("=")
        if not eq or not key:
            raise ValueError(f"--variants: '{item}': expected PROFILE:KEY=V1,V2 (e.g. eagle3:max_draft_len=1,2,3)")
        if key not in VARIANT_KEYS:
            raise ValueError(f"--variants: '{item}': unknown key '{key}' (allowed: {', '.join(VARIANT_KEYS)})")
        if not PROFILES[profile]["llm_api_options"].get("speculative_config"):
            raise ValueError(f"--variants: '{item}': profile {profile} has no speculation, so no {key}")
        for raw in values.split(","):
            if not re.fullmatch(r"[1-9][0-9]{0,2}", raw.strip()):
                raise ValueError(f"--variants: '{item}': {key} value '{raw}' is not an integer in 1..999")
            value = int(raw)
            section, name = VARIANT_KEYS[key]
            out.append(Variant(f"{profile}:{key}={value}", profile, {section: {name: value}}, ((key, value),)))
    seen: set[str] = set()
    for v in out:
        if v.name in seen:
            raise ValueError(f"--variants: '{v.name}' is given twice")
        seen.add(v.name)
    return out


def assign_rounds(variants: list[Variant], hosts: list[str]) -> list[list[tuple[str, Variant]]]:
    """Rounds of (host, variant): one variant per host per round, in order."""
    return [list(zip(hosts, variants[i:i + len(hosts)])) for i in range(0, len(variants), len(hosts))]


# ---- prompts (deterministic, documented in the README) ------------------------------------------------------
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


def acceptance(iterations: list[dict]) -> dict:
    """Acceptance from TensorRT-LLM iteration stats: length = (accepted + requests with drafts) / requests with
    drafts (summed over iterations, as py_executor computes it per iteration), rate = accepted / drafted."""
    drafted = accepted = with_draft = 0
    gpu_peak = 0
    for it in iterations:
        gpu_peak = max(gpu_peak, int(it.get("gpuMemUsage") or 0))
        sd = it.get("specDecodingStats") or {}
        drafted += int(sd.get("numDraftTokens") or 0)
        accepted += int(sd.get("numAcceptedTokens") or 0)
        with_draft += int(sd.get("numRequestsWithDraftTokens") or 0)
    return {
        "iterations": len(iterations), "draft_tokens": drafted, "accepted_tokens": accepted,
        "requests_with_draft": with_draft,
        "acceptance_length": (accepted + with_draft) / with_draft if with_draft else None,
        "acceptance_rate": accepted / drafted if drafted else None,
        "gpu_mem_peak_bytes": gpu_peak or None,
    }


def summarize_bucket(raw: dict) -> dict:
    """The figures of one variant x bucket from the load client's raw result."""
    reqs = [r for r in raw.get("requests", []) if not r.get("error")]
    errors = [r["error"] for r in raw.get("requests", []) if r.get("error")]
    itl = [g for r in reqs for g in r.get("itl_s", [])]
    tpot = [(r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) for r in reqs
            if r.get("ttft_s") is not None and r.get("output_tokens", 0) > 1]
    out_tokens = sum(r.get("output_tokens", 0) for r in reqs)
    wall = raw.get("wall_s") or 0.0
    mem = dict(raw.get("mem_peak") or {})
    acc = acceptance(raw.get("iterations") or [])
    if acc["gpu_mem_peak_bytes"]:
        mem.setdefault("gpu_bytes", acc["gpu_mem_peak_bytes"])
    return {
        "requests": len(reqs), "errors": errors, "output_tokens": out_tokens, "wall_s": wall,
        "tokens_per_s": out_tokens / wall if wall > 0 and reqs else None,  # output throughput of the bucket
        "ttft_s": {"mean": _mean([r["ttft_s"] for r in reqs]), "p50": percentile([r["ttft_s"] for r in reqs], 50),
                   "p90": percentile([r["ttft_s"] for r in reqs], 90)},
        "itl_s": {"mean": _mean(itl), "p50": percentile(itl, 50), "p90": percentile(itl, 90)},
        "tpot_s": {"mean": _mean(tpot)},
        "latency_s": {"p50": percentile([r["e2e_s"] for r in reqs], 50), "p90": percentile([r["e2e_s"] for r in reqs], 90)},
        "acceptance_length": acc["acceptance_length"], "acceptance_rate": acc["acceptance_rate"],
        "spec": acc, "mem_peak": mem,
    }


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def add_speedups(results: list[dict]) -> None:
    """speedup = tokens/s / the baseline's tokens/s for the same bucket on the same host class (arch + GPU)."""
    base: dict[tuple, float] = {}
    for r in results:
        if r["profile"] == "baseline" and r.get("buckets"):
            for b, fig in r["buckets"].items():
                if fig.get("tokens_per_s"):
                    base.setdefault((r["host_class"], b), fig["tokens_per_s"])
    for r in results:
        for b, fig in (r.get("buckets") or {}).items():
            ref = base.get((r["host_class"], b))
            fig["speedup"] = fig["tokens_per_s"] / ref if ref and fig.get("tokens_per_s") else None


def host_class(env: dict) -> str:
    return f"{env.get('arch', '?')}/{env.get('gpu') or 'no GPU'}"


def best_variant(results: list[dict]) -> dict | None:
    """The speculative variant with the highest mean speed-up over the buckets (it must beat baseline)."""
    scored = []
    for r in results:
        ups = [f["speedup"] for f in (r.get("buckets") or {}).values() if f.get("speedup")]
        if r["profile"] != "baseline" and ups and not r.get("error"):
            scored.append((sum(ups) / len(ups), r))
    scored.sort(key=lambda x: -x[0])
    return scored[0][1] if scored and scored[0][0] > 1.0 else None


# ---- output -------------------------------------------------------------------------------------------------
def _f(x, fmt="{:.2f}", none="-"):
    return none if x is None else fmt.format(x)


def table(results: list[dict]) -> list[str]:
    rows = [("variant", "host", "bucket", "tokens/s", "speedup", "acc.len", "acc.rate", "TTFT p50", "ITL mean",
             "lat p50", "lat p90")]
    for r in results:
        if r.get("error") or not r.get("buckets"):
            rows.append((r["variant"], r["host"], "-", "-", "-", "-", "-", "-", "-", "-", r.get("error") or "no data"))
            continue
        for b, f in r["buckets"].items():
            rows.append((r["variant"], r["host"], b, _f(f["tokens_per_s"], "{:.1f}"), _f(f.get("speedup"), "{:.2f}x"),
                         _f(f["acceptance_length"]), _f(f["acceptance_rate"]), _f(f["ttft_s"]["p50"], "{:.3f}s"),
                         _f(f["itl_s"]["mean"], "{:.4f}s"), _f(f["latency_s"]["p50"], "{:.2f}s"),
                         _f(f["latency_s"]["p90"], "{:.2f}s")))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]


def plot(results: list[dict], path: Path, title: str) -> Path:
    """Speed-up and acceptance length vs max_draft_len, one line per (profile, bucket); baseline marked at 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    series: dict[tuple, list] = {}
    for r in results:
        for b, f in (r.get("buckets") or {}).items():
            if r["profile"] == "baseline":
                continue
            series.setdefault((r["profile"], b), []).append((r["max_draft_len"], f.get("speedup"), f.get("acceptance_length")))
    for (profile, b), pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] if p[1] is not None else float("nan") for p in pts], marker="o", label=f"{profile} {b}")
        ax2.plot(xs, [p[2] if p[2] is not None else float("nan") for p in pts], marker="o", label=f"{profile} {b}")
    ax1.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax1.scatter([0], [1.0], marker="*", s=160, color="black", zorder=5, label="baseline (1.0x)")
    ax2.scatter([0], [1.0], marker="*", s=160, color="black", zorder=5, label="baseline (1 token/iter)")
    ax1.set(xlabel="max_draft_len", ylabel="speed-up vs baseline (output tokens/s)", title="Speed-up")
    ax2.set(xlabel="max_draft_len", ylabel="acceptance length (tokens/iteration)", title="Acceptance length")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ---- plans and host-side steps ------------------------------------------------------------------------------
def variant_plans(inventory, hosts_variants: list[tuple[str, Variant]], keep_extra: int) -> dict[str, HostPlan]:
    """Per host, the plan of its variant: the host's vars + the variant's extra_llm_api_options (deep-merged over
    the host's own) + enable_iter_perf_stats; keep_releases raised so the release served before is never pruned."""
    from .llm_options import deep_merge

    plans: dict[str, HostPlan] = {}
    by_profile: dict[str, list[tuple[str, Variant]]] = {}
    for h, v in hosts_variants:
        by_profile.setdefault(v.name, []).append((h, v))
    for _, pairs in by_profile.items():
        v = pairs[0][1]
        hvars = {}
        for h, _ in pairs:
            base = copy.deepcopy(inventory.host_vars[h])
            base["extra_llm_api_options"] = deep_merge(base.get("extra_llm_api_options") or {},
                                                       {**copy.deepcopy(v.options), "enable_iter_perf_stats": True})
            base["keep_releases"] = int(base.get("keep_releases", 5)) + keep_extra
            hvars[h] = base
        inv = dataclasses.replace(inventory, hosts=[h for h, _ in pairs], host_vars=hvars,
                                  groups={g: [h for h in m if h in hvars] for g, m in inventory.groups.items()})
        plans.update(build_plans(inv, v.profile, resolve=True))
    return plans


def _restore_deploy():
    from pyinfra import host
    from pyinfra.api import deploy

    from .steps._common import current_plan, host_status
    from .steps.jobs import host_job

    @deploy("Bench: return to the release served before")
    def restore(targets: dict[str, str]):
        plan = current_plan()
        s, p = plan.settings, plan.paths
        target = targets.get(host.name)
        st = host_status(plan)
        if not target or (target == st.current and st.active == "active" and st.gate_passed(target)):
            return
        host_job(name=f"Switch back to release {target} and gate it", key=f"activate:{target}",
                 argv=[p.host_tool, "--data-dir", s.data_dir, "activate", target, "--revert"])

    return restore


def _load_deploy():
    from pyinfra.api import deploy
    from pyinfra.operations import files, python

    from .steps._common import current_plan
    from .steps.jobs import run_on_host

    @deploy("Bench: load")
    def load(specs: dict[str, dict], out: dict):
        plan = current_plan()
        tool = f"{plan.paths.bin}/{LOAD_TOOL}"
        files.put(name=f"Install {LOAD_TOOL}", src=str(resources.files("specfleet.host") / "bench_load.py"),
                  dest=tool, user="root", group="root", mode="755")

        def run(state, host):
            ok, stdout, stderr = run_on_host(state, host, f"python3 {tool}", stdin=json.dumps(specs[host.name]))
            try:
                out[host.name] = json.loads(stdout[-1])
            except (IndexError, ValueError):
                out[host.name] = {"error": (stderr or stdout or ["no output"])[-1]}
            return True

        python.call(name="Run the bench load on the host (against its loopback server)", function=run)

    return load


# ---- the command ---------------------------------------------------------------------------------------------
def _log(msg: str) -> None:
    click.echo(f"[bench {time.strftime('%H:%M:%S')}] {msg}", err=True)


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--variants", "variant_specs", multiple=True, required=True,
              help="Variants, e.g. 'baseline eagle3:max_draft_len=1,2,3 draft_target:max_draft_len=2,4' "
                   "(space-separated, or repeat --variants).")
@click.option("--limit", default=DEFAULT_GROUP, show_default=True, help="Bench hosts or groups (comma-separated).")
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--requests", "n_requests", type=click.IntRange(1, 10000), default=8, show_default=True,
              help="Measured requests per bucket (after the warm-up).")
@click.option("--warmup", type=click.IntRange(0, 100), default=1, show_default=True, help="Warm-up requests per bucket (not measured).")
@click.option("--buckets", default="short,medium,long", show_default=True, help="Prompt-length buckets to run.")
@click.option("--max-tokens", type=click.IntRange(1, 65536), default=256, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for bench.json and bench.png (default: bench-<time>/ in the current directory).")
@click.option("--health-timeout", type=int, default=None, help="Override health_timeout_sec for the gates.")
@click.option("--apply", "apply_to", default=None, metavar="GROUP",
              help="Write the best variant's overrides into GROUP's vars in the fleet file (shows the diff first).")
@click.option("--yes", is_flag=True, help="With --apply: write without asking.")
def bench(inventory_file, variant_specs, limit, concurrency, n_requests, warmup, buckets, max_tokens, temperature,
          out_dir, health_timeout, apply_to, yes):
    """Benchmark speculative-decoding VARIANTS on bench hosts: each variant is a release staged, switched and
    gated on a host; the load runs on the host; every host returns to the release it served before.

    Exit 0: every variant measured; 1: a variant failed (its gate, its load) or a host was unreachable; 2: invalid
    input (nothing touched)."""
    from .rollout import read_statuses, run_on, select
    from .steps import lock, stage, switch, unlock

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyinfra.specfleet").setLevel(logging.INFO)
    try:
        variants = parse_variants(variant_specs)
        wanted = [b.strip() for b in buckets.split(",") if b.strip()]
        unknown = [b for b in wanted if b not in BUCKETS]
        if unknown or not wanted:
            raise ValueError(f"--buckets: '{buckets}': allowed: {', '.join(BUCKETS)}")
        use_project(inventory_file)
        inventory = load_inventory_or_fail()
        hosts = select(inventory.hosts, inventory.groups, limit)
        if not hosts:
            raise PlanError([f"--limit {limit}: matches no host of the inventory"
                             + (" (add a `bench` group to the fleet file or pass --limit)" if limit == DEFAULT_GROUP else "")])
        rounds = assign_rounds(variants, hosts)
        all_plans = [variant_plans(inventory, r, keep_extra=len(rounds) + 1) for r in rounds]
        base_plans = build_plans(inventory, None, resolve=False)
        if apply_to and apply_to not in inventory.groups and apply_to != "all":
            raise PlanError([f"--apply {apply_to}: no such group in the fleet file (groups: {', '.join(inventory.groups)})"])
    except (PlanError, ValueError) as exc:
        for line in getattr(exc, "lines", [str(exc)]):
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)

    bench_id = uuid.uuid4().hex[:8]
    prompts = prompt_set({b: BUCKETS[b] for b in wanted}, per_bucket=max(n_requests, warmup, 1))
    out_path = Path(out_dir or f"bench-{time.strftime('%Y%m%d-%H%M%S')}")
    _log(f"{bench_id}: {len(variants)} variant(s) on {len(hosts)} host(s) in {len(rounds)} round(s)")
    held: dict[str, str] = {}
    lock_failed = run_on(base_plans, hosts, lock, bench_id, held, "bench")
    if held:
        run_on(base_plans, [h for h in hosts if h not in lock_failed], unlock, bench_id, "bench")
        for h, owner in held.items():
            click.echo(f"{h}: refused: another run holds the lock: {owner}", err=True)
        sys.exit(EXIT_FAILED)
    usable = [h for h in hosts if h not in lock_failed]
    before = {h: info.get("current") for h, info in read_statuses(base_plans, usable).items()}
    results: list[dict] = []
    for h in lock_failed:
        _log(f"{h}: unreachable; its variants are skipped")
    touched: set[str] = set()
    interrupted = False
    try:
        for index, (rnd, plans) in enumerate(zip(rounds, all_plans), 1):
            pairs = [(h, v) for h, v in rnd if h in usable]
            for h, v in rnd:
                if h not in usable:
                    results.append(_result(v, h, plans.get(h), error="host unreachable"))
            hs = [h for h, _ in pairs]
            if not hs:
                continue
            _log(f"round {index}/{len(rounds)}: " + ", ".join(f"{h} <- {v.name}" for h, v in pairs))
            touched.update(hs)
            failed = run_on(plans, hs, stage)
            ok = [h for h in hs if h not in failed]
            failed |= run_on(plans, ok, switch, health_timeout)
            after = read_statuses(plans, hs)
            live = [h for h in hs if h not in failed and (after.get(h) or {}).get("current") == plans[h].release_id]
            specs = {h: {"url": _url(plans[h]), "model": plans[h].settings.profile["target"]["repo"],
                         "buckets": prompts, "requests": n_requests, "concurrency": concurrency, "warmup": warmup,
                         "max_tokens": max_tokens, "temperature": temperature, "metrics": True} for h in live}
            raw: dict[str, dict] = {}
            if live:
                _log(f"round {index}: load on {', '.join(live)} ({len(wanted)} bucket(s) x {n_requests} request(s), "
                     f"concurrency {concurrency})")
                run_on(plans, live, _load_deploy(), specs, raw)
            for h, v in pairs:
                if h not in live:
                    why = ("failed to stage" if h not in ok else
                           "failed its gate (rolled back)" if (after.get(h) or {}).get("current") != plans[h].release_id
                           else "failed to switch")
                    results.append(_result(v, h, plans[h], error=why))
                elif "error" in raw.get(h, {"error": "no result"}):
                    results.append(_result(v, h, plans[h], error=f"load failed: {raw.get(h, {}).get('error', 'no result')}"))
                else:
                    results.append(_result(v, h, plans[h], raw=raw[h]))
                _log(f"  {h} {v.name}: {results[-1].get('error') or 'measured'}")
    except KeyboardInterrupt:
        interrupted = True
        _log("interrupted: returning every host to the release it served before")
    finally:
        restore_plans = {h: base_plans[h] for h in touched}
        targets = {h: before.get(h) for h in touched}
        not_restored = run_on(restore_plans, [h for h in touched if targets[h]], _restore_deploy(), targets)
        run_on(base_plans, usable, unlock, bench_id, "bench")
        final = read_statuses(base_plans, list(touched)) if touched else {}
        for h in touched:
            if not targets[h]:
                _log(f"{h}: served no release before the bench; it now serves {final.get(h, {}).get('current')}")
            elif h in not_restored or final.get(h, {}).get("current") != targets[h]:
                _log(f"{h}: NOT back on {targets[h]} (serves {final.get(h, {}).get('current')}): "
                     f"run pyinfra inventory.py deploys/rollback.py --limit {h} --data rollback_to={targets[h]}")
            else:
                _log(f"{h}: back on {targets[h]}")
    if interrupted:
        sys.exit(130)

    add_speedups(results)
    standin = any("standin" in (r.get("image") or "").lower() for r in results)
    doc = {"bench_id": bench_id, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "standin": standin,
           "settings": {"concurrency": concurrency, "requests": n_requests, "warmup": warmup, "max_tokens": max_tokens,
                        "temperature": temperature, "buckets": {b: BUCKETS[b] for b in wanted}, "ignore_eos": True},
           "prompts": prompts, "results": results}
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / "bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    title = f"specfleet bench {bench_id}" + (" -- STAND-IN, SYNTHETIC figures (not TensorRT-LLM)" if standin else "")
    png = plot(results, out_path / "bench.png", title)
    click.echo("\n".join(table(results)))
    click.echo(f"\nwrote {out_path / 'bench.json'} and {png}")
    if standin:
        click.echo("NOTE: this bench ran against the trtllm-serve STAND-IN (image name contains 'standin'): the figures "
                   "come from its SYNTHETIC speculative-decoding model, not from TensorRT-LLM on a GPU.")
    if any(r["profile"] == "draft_target" for r in results):
        click.echo("note: draft_target serves another target model (Llama-3.3-70B) than baseline (gpt-oss-120b): "
                   "its speed-up compares different models.")
    failed_any = [r for r in results if r.get("error")]
    if apply_to:
        apply_best(results, inventory.path, apply_to, yes)
    sys.exit(EXIT_FAILED if failed_any else EXIT_OK)


def _url(plan: HostPlan) -> str:
    return plan.release_record("")["url"]


def _result(v: Variant, h: str, plan: HostPlan | None, raw: dict | None = None, error: str | None = None) -> dict:
    env = (raw or {}).get("env") or {}
    out = {"variant": v.name, "profile": v.profile, "params": dict(v.params), "max_draft_len": v.max_draft_len,
           "overrides": {"extra_llm_api_options": v.options} if v.options else {}, "host": h, "error": error,
           "release": plan.release_id if plan else None,
           "image": plan.settings.image if plan else None, "image_digest": plan.image_digest if plan else None,
           "models": {role: {"repo": p.repo, "commit": p.commit} for role, p in (plan.pins.items() if plan else [])},
           "env": env, "host_class": host_class(env), "buckets": {}, "raw": raw}
    if raw:
        out["buckets"] = {b: summarize_bucket(r) for b, r in raw.get("buckets", {}).items()}
    return out


def apply_best(results: list[dict], fleet_path: Path, group: str, yes: bool) -> bool:
    """Write the best variant's overrides into GROUP's vars of the fleet file, after showing the diff."""
    import difflib

    import yaml

    from .llm_options import deep_merge

    best = best_variant(results)
    if not best:
        click.echo("--apply: no speculative variant beat baseline; nothing written")
        return False
    options = (best.get("overrides") or {}).get("extra_llm_api_options") or {}
    old_text = Path(fleet_path).read_text()
    doc = yaml.safe_load(old_text)
    node = doc["all"] if group == "all" else _find_group(doc["all"], group)
    if node is None:
        click.echo(f"--apply: group {group} not found in {fleet_path}", err=True)
        return False
    node.setdefault("vars", {}) if node.get("vars") is not None else node.__setitem__("vars", {})
    node["vars"]["extra_llm_api_options"] = deep_merge(node["vars"].get("extra_llm_api_options") or {}, options)
    new_text = yaml.safe_dump(doc, sort_keys=False)
    diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                        str(fleet_path), str(fleet_path) + " (with " + best["variant"] + ")"))
    click.echo(f"--apply: best variant {best['variant']}; diff of {fleet_path}:\n{diff}")
    click.echo("(note: the rewrite drops YAML comments)" if "#" in old_text else "", nl="#" in old_text)
    if not yes and not click.confirm("write it?", default=False):
        click.echo("not written")
        return False
    Path(fleet_path).write_text(new_text)
    click.echo(f"wrote {fleet_path}; roll it out with specfleet rollout inventory.py deploys/{best['profile']}.py "
               f"(these options apply to every profile deployed to {group}: baseline has no speculative_config)")
    return True


def _find_group(node: dict, name: str):
    for child_name, child in (node.get("children") or {}).items():
        child = child if child is not None else {}
        if child_name == name:
            node["children"][child_name] = child
            return child
        found = _find_group(child, name)
        if found is not None:
            return found
    return None
