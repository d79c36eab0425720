"""`specfleet bench`: measure speculative-decoding variants on bench hosts (bench.py: variants, statistics, outputs;
bench_run.py: the run on the hosts)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from ..bench import run as bench_run
from ..bench.apply import fleet_diff, with_best_variant
from ..bench.rules import (
    BUCKETS,
    DEFAULT_GROUP,
    assign_rounds,
    parse_buckets,
    parse_variants,
    prompt_set,
    table,
    variant_plans,
    write_outputs,
)
from ..fleet.profiles import profiles
from ..fleet.project import use_project
from ..fleet.selection import select
from ..plan import PlanError, build_plans, load_inventory_or_fail
from .invalid import invalid_input

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def _log(msg: str) -> None:
    click.echo(f"[bench {time.strftime('%H:%M:%S')}] {msg}", err=True)


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--variants", "variant_specs", multiple=True, required=True, help="Variants, e.g. 'baseline eagle3:"
              "max_draft_len=1,3 vllm_eagle3:num_speculative_tokens=3,5' (space-separated, or repeat --variants).")
@click.option("--limit", default=DEFAULT_GROUP, show_default=True, help="Bench hosts or groups (comma-separated).")
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True)
@click.option("--requests", "n_requests", type=click.IntRange(1, 10000), default=8, show_default=True,
              help="Measured requests per bucket (after the warm-up).")
@click.option("--warmup", type=click.IntRange(0, 100), default=1, show_default=True,
              help="Warm-up requests per bucket (not measured).")
@click.option("--buckets", default="short,medium,long", show_default=True, help="Prompt-length buckets to run.")
@click.option("--max-tokens", type=click.IntRange(1, 65536), default=256, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Directory for bench.json and bench.png (default: bench-<time>/ in the current directory).")
@click.option("--health-timeout", type=int, default=None, help="Override health_timeout_sec for the gates.")
@click.option("--apply", "apply_to", default=None, metavar="GROUP",
              help="Set GROUP's serves and options in the fleet file to the best variant's (diff first).")
@click.option("--yes", is_flag=True, help="With --apply: write without asking.")
def bench(inventory_file, variant_specs, limit, concurrency, n_requests, warmup, buckets, max_tokens, temperature,
          out_dir, health_timeout, apply_to, yes):
    """Benchmark speculative-decoding VARIANTS on bench hosts: each variant is a release staged, switched and
    gated on a host; the load runs on the host; every host returns to the release it served before.

    Exit 0: every variant measured; 1: a variant failed (its gate, its load) or a host was unreachable; 2: invalid
    input (nothing touched)."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("pyinfra.specfleet").setLevel(logging.INFO)
    with invalid_input(ValueError):
        variants = parse_variants(variant_specs)
        wanted = parse_buckets(buckets)
        use_project(inventory_file)
        inventory = load_inventory_or_fail()
        hosts = select(inventory.hosts, inventory.groups, limit)
        if not hosts:
            raise PlanError([f"--limit {limit}: matches no host of the inventory" + (
                " (add a `bench` group to the fleet file or pass --limit)" if limit == DEFAULT_GROUP else "")])
        rounds = assign_rounds(variants, hosts)
        round_plans = [variant_plans(inventory, r, keep_extra=len(rounds) + 1) for r in rounds]
        base_plans = build_plans(inventory, None, resolve=False)
        if apply_to and apply_to not in inventory.groups and apply_to != "all":
            raise PlanError([f"--apply {apply_to}: no such group in the fleet file (groups: {', '.join(inventory.groups)})"])  # noqa: E501
    prompts = prompt_set({b: BUCKETS[b] for b in wanted}, per_bucket=max(n_requests, warmup, 1))
    out_path = Path(out_dir or f"bench-{time.strftime('%Y%m%d-%H%M%S')}")
    b = bench_run.Bench(hosts, rounds, round_plans, base_plans, health_timeout=health_timeout, log=_log, load={
        "buckets": prompts, "requests": n_requests, "concurrency": concurrency, "warmup": warmup,
        "max_tokens": max_tokens, "temperature": temperature})
    bench_run.run(b)
    if b.refused:
        for h, owner in b.refused.items():
            click.echo(f"{h}: refused: another run holds the lock: {owner}", err=True)
        sys.exit(EXIT_FAILED)
    if b.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    settings = {"concurrency": concurrency, "requests": n_requests, "warmup": warmup, "max_tokens": max_tokens,
                "temperature": temperature, "buckets": {name: BUCKETS[name] for name in wanted}, "ignore_eos": True}
    _report(*write_outputs(out_path, b.id, settings, prompts, b.results), b.results)
    if apply_to:
        apply_best(b.results, inventory.path, apply_to, yes)
    sys.exit(EXIT_FAILED if any(r.get("error") for r in b.results) else EXIT_OK)


def _report(json_path: Path, png: Path, standin: bool, results: list[dict]) -> None:
    click.echo("\n".join(table(results)))
    click.echo(f"\nwrote {json_path} and {png}")
    if standin:
        click.echo("NOTE: this bench ran against a STAND-IN server (image name contains 'standin'): the figures come "
                   "from its SYNTHETIC speculative-decoding model, not from an engine on a GPU.")
    targets = {r["profile"]: profiles()[r["profile"]]["target"]["repo"] for r in results}
    if len(set(targets.values())) > 1:
        click.echo("note: the variants serve different target models ("
                   + ", ".join(f"{p}: {m}" for p, m in sorted(targets.items())) + "): a speed-up is against its "
                   "engine's baseline, which serves gpt-oss-120b, and compares different models for the others.")


def apply_best(results: list[dict], fleet_path: Path, group: str, yes: bool) -> bool:
    """Write the best variant's overrides into GROUP's vars of the fleet file, after showing the diff."""
    best, old_text, new_text = with_best_variant(results, fleet_path, group)
    if not best:
        click.echo("--apply: no speculative variant beat baseline; nothing written")
        return False
    if new_text is None:
        click.echo(f"--apply: group {group} not found in {fleet_path}", err=True)
        return False
    click.echo(f"--apply: best variant {best['variant']}; diff of {fleet_path}:\n"
               f"{fleet_diff(fleet_path, old_text, new_text, best['variant'])}")
    if not yes and not click.confirm("write it?", default=False):
        click.echo("not written")
        return False
    Path(fleet_path).write_text(new_text)
    click.echo(f"wrote {fleet_path}; {group} now serves {best['profile']}: roll it out with "
               f"specfleet rollout inventory.py deploys/{best['profile']}.py")
    return True
