"""Which hosts a command touches and in which batches (pure; unit-tested): `--limit` as in pyinfra, the rollout's
`--batches` ramp and its `--max-fail` tolerance."""

from __future__ import annotations

import fnmatch


def parse_batches(spec: str, n_hosts: int) -> list[int]:
    """Sizes of successive batches for an Ansible-style ramp ("1,25%,100%"); the last entry repeats."""
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    if not entries:
        raise ValueError("--batches needs at least one entry, e.g. 1,25%")
    sizes: list[int] = []
    for entry in entries:
        try:
            if entry.endswith("%"):
                pct = float(entry[:-1])
                if not 0 < pct <= 100:
                    raise ValueError
                sizes.append(max(1, int(n_hosts * pct / 100)))
            else:
                size = int(entry)
                if size <= 0:
                    raise ValueError
                sizes.append(size)
        except ValueError:
            raise ValueError(f"--batches: '{entry}' is not a host count > 0 or a percentage in (0, 100]") from None
    out, done, i = [], 0, 0
    while done < n_hosts:
        size = min(sizes[min(i, len(sizes) - 1)], n_hosts - done)
        out.append(size)
        done += size
        i += 1
    return out


def members(targets: list[str], pairs: dict[str, str]) -> list[list[str]]:
    """What a rollout batch counts, in the targets' order: a single Spark `[host]`, or a two-Spark pair `[head, worker]`
    (it switches as one: its head's job drives both). `pairs`: head -> worker, for the targets' pairs."""
    worker_of = {w: h for h, w in pairs.items()}
    out, seen = [], set()
    for h in targets:
        head = worker_of.get(h, h)
        if head in seen:
            continue
        seen.add(head)
        out.append([head, pairs[head]] if head in pairs else [h])
    return out


def whole_model_batches(spec: str, targets: list[str], peers: dict[str, tuple[str, list[str]]]) -> list[str]:
    """Behind gateways: a problem line per planned batch that would switch every Spark of a model at once, leaving
    the gateways none to send its requests to. `peers`: target -> (its model, every Spark of that model). A model
    served by one Spark only can be switched no other way: allowed."""
    out, done = [], 0
    for index, size in enumerate(parse_batches(spec, len(targets)), 1):
        batch = set(targets[done:done + size])
        done += size
        for model, sparks in sorted({peers[h][0]: tuple(peers[h][1]) for h in batch if h in peers}.items()):
            if len(sparks) > 1 and set(sparks) <= batch:
                out.append(f"--batches {spec}: batch {index} switches every Spark of {model} at once "
                           f"({', '.join(sparks)}): the gateways would have none to send its requests to "
                           "(allowed: batches that leave one of them serving, e.g. 1,1)")
    return out


def parse_max_fail(spec: str, n_hosts: int) -> int:
    """Failures tolerated: the rollout halts once failures EXCEED this number."""
    try:
        if spec.endswith("%"):
            pct = float(spec[:-1])
            if not 0 <= pct <= 100:
                raise ValueError
            return int(n_hosts * pct / 100)
        value = int(spec)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        raise ValueError(f"--max-fail: '{spec}' is not a host count >= 0 or a percentage in [0, 100]") from None


def select(hosts: list[str], groups: dict[str, list[str]], limit: str | None) -> list[str]:
    """--limit as in pyinfra: comma-separated host or group names (glob patterns allowed); inventory order."""
    if not limit:
        return list(hosts)
    chosen: set[str] = set()
    for pattern in (p.strip() for p in limit.split(",") if p.strip()):
        for group, members in groups.items():
            if fnmatch.fnmatch(group, pattern):
                chosen.update(members)
        chosen.update(h for h in hosts if fnmatch.fnmatch(h, pattern))
    return [h for h in hosts if h in chosen]
