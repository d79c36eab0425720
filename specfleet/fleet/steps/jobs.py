"""Host jobs: long host-side work (model fetch, image pull, activate + readiness gate, prune) runs detached
from the SSH session, as a transient systemd unit per job on the host (`specfleet-host job start`), with a
log and a progress file. The controller follows the job and prints a progress line every PROGRESS_EVERY
seconds. If the controller or its SSH session dies, the job finishes (or reverts) on its own; the next run
attaches to a job that is still running instead of starting a second one (jobs are keyed by what they do:
`fetch:<repo>@<commit>`, `activate:<release>`, ...; one job at a time per host)."""

from __future__ import annotations

import json
import logging
import shlex
import time
from collections.abc import Callable
from typing import Any

from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.operations import python

from .state import current_plan

PROGRESS_EVERY = 10.0  # seconds between progress lines while a job runs
# a progress kind with bytes -> its count of parts done, of parts, and their name
_COUNTS = {"fetch": ("files_done", "files_total", "files"), "pull": ("layers_done", "layers_total", "layers"),
           "image-fetch": ("done", "total", "images")}
POLL_EVERY = 2.0  # seconds between job status reads of a host tool without `job status --wait` (an older host tool)

log = logging.getLogger("pyinfra.specfleet")


def host_job(name: str, key: str, argv: list[str], env: dict[str, str] | None = None) -> None:
    """An operation that runs `argv` as a host job (never a secret in argv or env: they are on a command line)."""
    python.call(name=name, function=_follow, key=key, argv=list(argv), env=dict(env or {}))


def run_on_host(state, host, command: str, stdin: str | None = None) -> tuple[bool, list[str], list[str]]:
    """Run a command from inside an operation's function, with the host's sudo/connection arguments."""
    arguments, _ = pop_global_arguments(state, host, {})
    connector: dict[str, Any] = {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}
    if stdin is not None:
        connector["_stdin"] = stdin
    try:
        ok, output = host.run_shell_command(command, **connector)
    except Exception as exc:  # connection lost (paramiko/socket errors): reported by the caller
        return False, [], [f"{type(exc).__name__}: {exc}"]
    return ok, list(output.stdout_lines), list(output.stderr_lines)


def write_root_file(state, host, path: str, content: str, mode: str) -> bool:
    """Write a root-owned file atomically from stdin (no temp upload outside its directory; created under umask 077,
    so a secret is never readable by others, not even before its chmod)."""
    tmp = f"{path}.specfleet-tmp"
    script = (f"umask 077 && cat > {shlex.quote(tmp)} && chown root:root {shlex.quote(tmp)} && "
              f"chmod {mode} {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(path)}")
    ok, _, err = run_on_host(state, host, f"sh -c {shlex.quote(script)}", stdin=content)
    if not ok:
        _say(host, f"writing {path} failed: {' '.join(err[-1:])}", error=True)
    return ok


def _say(host, line: str, error: bool = False) -> None:
    (log.error if error else log.info)(f"{host.print_prefix}{line}")


def _follow(state, host, key: str, argv: list[str], env: dict[str, str],
            on_failure: Callable[[str], None] | None = None) -> bool:
    """Run `argv` as a host job and follow it to its end (True: it succeeded). A job that failed or was lost is said
    with its log's tail, or, with `on_failure`, handed to it in one line (its caller says what follows from it)."""
    tool = shlex.join(current_plan().paths.host_tool_argv())
    start = start_command(tool, key, argv, env)
    waited: str | None = None
    while True:
        ok, out, err = run_on_host(state, host, start)
        try:
            info = json.loads(out[-1])
        except (IndexError, ValueError):
            _say(host, f"{key}: could not start the host job: {(err or out or ['no output'])[-1]}", error=True)
            return False
        if info.get("state") != "busy":
            break
        if info["id"] != waited:
            waited = info["id"]
            _say(host, f"{key}: waiting for the host's running job {waited} ({info.get('key')}) to end")
        _watch(state, host, tool, info["id"], quiet=True)
    if info["state"] == "attached":
        _say(host, f"{key}: attached to job {info['id']}, already running on the host")
    result = _watch(state, host, tool, info["id"])
    if result.get("state") == "ok":
        return True
    if result.get("state") == "unreachable":
        _say(host, f"{key}: lost the host while following job {info['id']} ({result.get('message')}); the job "
                   "goes on on the host and the next run attaches to it", error=True)
        return False
    failure = f"job {info['id']} {result.get('state')}: {result.get('message') or 'no message'}"
    if on_failure is not None:
        on_failure(failure)
        return False
    _say(host, f"{key}: {failure}", error=True)
    for line in (result.get("log_tail") or "").splitlines():
        _say(host, f"    {line}", error=True)
    return False


def start_command(tool: str, key: str, argv: list[str], env: dict[str, str]) -> str:
    return (f"{tool} job start " + "".join(f"--env {shlex.quote(f'{k}={v}')} " for k, v in env.items())
            + f"{shlex.quote(key)} -- " + " ".join(shlex.quote(a) for a in argv))


def _watch(state, host, tool: str, jid: str, quiet: bool = False) -> dict:
    """Follow a job until it ends; print a progress line every PROGRESS_EVERY seconds. Returns its last status.
    Each read waits on the host while the job runs (`job status --wait`), so the end is heard at once, with one SSH
    command per PROGRESS_EVERY; a host tool older than that option is read every POLL_EVERY seconds instead."""
    started = time.monotonic()
    last_print = started
    wait = f" --wait {PROGRESS_EVERY:g}"
    while True:
        ok, out, err = run_on_host(state, host, f"{tool} job status {shlex.quote(jid)}{wait}")
        if wait and not ok and any("unrecognized arguments: --wait" in line for line in err):
            wait = ""  # the host's tool predates --wait (a rollback or bench before the next converge updates it)
            continue
        try:
            status = json.loads(out[-1])
        except (IndexError, ValueError):
            return {"state": "unreachable", "message": (err or out or ["no answer"])[-1]}
        if status.get("state") != "running":
            return status
        if not quiet and time.monotonic() - last_print >= PROGRESS_EVERY - 0.5:
            last_print = time.monotonic()
            _say(host, progress_line(status, time.monotonic() - started))
        if not wait:
            time.sleep(POLL_EVERY)


def progress_line(status: dict, elapsed: float) -> str:
    """One line for a running job: fetch bytes/rate/ETA, gate phase/elapsed/timeout, or just elapsed."""
    progress = status.get("progress") or {}
    kind = progress.get("kind")
    if kind in _COUNTS and progress.get("bytes_total"):  # a model fetch; an image's pull or fetch (mirror/host/)
        done, total = progress.get("bytes_done", 0), progress["bytes_total"]
        rate = progress.get("rate_bps") or 0
        eta = f"{progress['eta_s']:.0f}s" if isinstance(progress.get("eta_s"), (int, float)) else "?"
        n_done, n_total, unit = _COUNTS[kind]
        what = (f"fetch {progress.get('repo')}@{str(progress.get('commit', ''))[:12]}" if kind == "fetch"
                else f"{kind} {progress.get('ref')}")
        return (f"{what}: {done / 1e9:.2f}/{total / 1e9:.2f} GB ({100 * done / total:.0f}%, "
                f"{progress.get(n_done, 0)}/{progress.get(n_total, '?')} {unit}), {rate / 1e6:.1f} MB/s, ETA {eta}")
    if progress.get("kind") == "drain":  # drain.py: gateways yet to take the host out, or requests in flight
        what = "gateway(s) to answer" if progress.get("phase") == "gateways" else "request(s) in flight"
        return (f"drain before the restart: {progress.get('pending')} {what}, "
                f"{progress.get('elapsed', 0):.0f}s/{progress.get('timeout')}s")
    if progress.get("kind") == "gate":
        return (f"gate {progress.get('release')}: {progress.get('phase')} "
                f"{progress.get('elapsed', 0):.0f}s/{progress.get('timeout')}s, "
                f"unit {progress.get('unit') or '?'} ({progress.get('last') or ''})")
    return f"{status.get('key')}: running for {elapsed:.0f}s"
