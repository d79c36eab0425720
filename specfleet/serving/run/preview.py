"""What a converge would do on each host, read without changing anything (`specfleet plan`): the status read a
converge makes, the same decisions (fleet/steps/changes.py), reported per host."""

from __future__ import annotations

from pyinfra import host
from pyinfra.api import deploy

from ...constants import EXIT_UNREACHABLE
from ...fleet import run as runner
from ...fleet.steps.changes import changes
from ...fleet.steps.state import current_plan, host_status

EXIT_CHANGES = 10


@deploy("Plan (read only)")
def collect(out: dict):
    """Read the host's status (the SpecfleetHost fact a converge reads) and decide what would change."""
    plan = current_plan()
    st = host_status(plan)
    out[host.name] = (changes(plan), st.release.active == "active" and st.release.container_running)


def read_changes(plans, hosts) -> tuple[dict, set[str]]:
    """Per host: (Changes, serving) from one status read over pyinfra, read-only; and the unreachable hosts."""
    out: dict = {}
    failed = runner.run_on(plans, hosts, collect, out)
    return out, failed


def report(targets: list[str], found: dict, unreachable: set[str],
           skipped: dict[str, str] | None = None) -> tuple[list[str], int]:
    """The plan's lines and exit code (0 nothing would change, 10 something would, 1 a host is unreachable);
    `skipped`: the hosts this deploy leaves alone, and why."""
    lines: list[str] = []
    changed = 0
    skipped = skipped or {}
    ours = [h for h in targets if h not in skipped]
    unread = [h for h in ours if h in unreachable or h not in found]
    for h in targets:
        if h in skipped:
            lines.append(f"{h}: skipped ({skipped[h]})")
            continue
        if h in unread:
            lines.append(f"{h}: {runner.UNREAD}")
            continue
        changed += bool(found[h][0].lines())
        lines += describe(h, found[h])
    restarts = [h for h in ours if h not in unread and found[h][1] and found[h][0].restart]
    lines.append("\n" + counted(changed, len(ours), len(unread))
                 + (f"; {len(skipped)} skipped (not this deploy's)" if skipped else "")
                 + f"; {len(restarts)} serving host(s) would restart"
                 + ("; a converge restarts them all at once, specfleet rollout switches them in batches"
                    if len(restarts) > 1 else ""))
    return lines, exit_code(changed, len(unread))


def counted(changed: int, hosts: int, unread: int, kind: str = "") -> str:
    """The head of a plan's summary: how many of the deploy's hosts would change, and how many were not read."""
    return f"{changed} of {hosts} {kind}host(s) would change" + (f"; {unread} unreachable (status not read)"
                                                                  if unread else "")


def exit_code(changed: int, unread: int) -> int:
    """A plan's exit code: 1 a host was not read (whatever the others would do), else 10 something would change."""
    return EXIT_UNREACHABLE if unread else EXIT_CHANGES if changed else 0


def describe(name: str, found) -> list[str]:
    ch, serving = found
    head = (f"{name}: release {ch.current or '(none)'} -> {ch.release}" if ch.current != ch.release
            else f"{name}: release {ch.release}")
    lines = ch.lines()
    memory = [f"  memory: {ch.memory}"] if ch.memory else []  # what the preflight checks, shown either way
    memory += [f"  note: {note}" for note in ch.notes]
    if not lines:
        return [f"{head}: nothing to do", *memory]
    out = [f"{head}: {len(lines)} change(s)", *memory]
    restart = ch.restart
    out.append("  restart: " + (f"yes ({'; '.join(restart)})" if restart else "no")
               + ("" if serving or not restart else " (not serving now)"))
    others = [why for kind, why in ch.switch if why not in restart]
    if others:
        out.append(f"  activate without restart: {'; '.join(others)}")
    out += [f"  {f.line()}" for f in ch.fetches]
    if ch.pull:
        out.append(f"  {ch.pull}")
    out.append(f"  unit rewrite: {'yes' if ch.unit_rewrite else 'no'}")
    out.append(f"  token: {ch.token or 'unchanged'}")
    if ch.users:
        out.append(f"  docker group: add {', '.join(ch.users)}")
    if ch.dockerd:
        out.append(f"  {ch.dockerd}")
    out += [f"  {line}" for line in ch.earlyoom]
    if ch.install:
        out.append(f"  install {ch.install} in the fetch venv")
    if ch.writes:
        out.append(f"  write {len(ch.writes)} managed file(s): "
                   f"{', '.join(ch.writes[:6])}{' ...' if len(ch.writes) > 6 else ''}")
    if ch.removes:
        out.append(f"  remove {len(ch.removes)} file(s) left by a gateway group the fleet no longer has: "
                   f"{', '.join(ch.removes)}")
    return out
