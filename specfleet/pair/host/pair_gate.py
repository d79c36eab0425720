#!/usr/bin/env python3
"""The pair gate: what the head's MPI key may run on the worker. It is the key's forced command
(`command=` in the worker's authorized_keys, pair_files.authorized_key), so sshd runs it whatever the head asked,
with the asked command in $SSH_ORIGINAL_COMMAND. Each of the head's two keys has its own gate line:
- the MPI key's (`--container C --agent A`) lets OpenMPI's launch of its daemon through, `orted [--daemonize|
  --tree-spawn] (-mca|--mca KEY "VALUE")...`, run in the worker's serving container (`docker exec -i CONTAINER
  orted ...`, an argv, no shell);
- the switch key's (`--switch`) lets the head's switch of the pair through (host/pair_switch.py), `specfleet-host
  activate ID --pair-worker` with ID a release id (layout.RELEASE_ID), run as the host tool beside this gate: it
  activates only a release already staged on the worker and marked a worker's, and (re)starts nothing but the
  worker's container; and the head's revert of a failed first pair release, `specfleet-host leave-pair ID` (the
  worker goes back to the release it served alone before ID, already on it). The switch key stays on the head's
  host: no container sees it.
The launch waits (CONTAINER_WAIT_SEC at most) for the worker's container to run before it starts orted in it: after
the container died (and the MPI world with it), both units' restart policies start their side again, and the head's
relaunch must not depend on which comes back first (a lost race costs a head start, StartLimitBurst allows 3).
Anything else (`id`, a shell, a second command, an MCA parameter outside LAUNCH_PARAMS, an rsh agent other than
the pair's, the other key's command, another host tool command or option) is refused with one line on stderr and
exit 126, and nothing runs.

The launch line is OpenMPI's, not ours: mpirun's rsh launcher (plm rsh) runs `<plm_rsh_agent> HOST orted ...`, which
the pair's agent on the head passes to ssh, and sshd hands it here as one string for a POSIX shell (values in
double quotes). Read from Debian's openmpi-bin 4.1.4 (bookworm, the stand-in's base) with a recording agent; the
lines are tests/unit/pair_launch_lines.txt. mpirun sends the program to run (trtllm-serve) and its environment
(-x HF_TOKEN ...) to orted over its own TCP connection, never on this line.

What the MPI key can still do, by design: start orted in the serving container, which then runs what the head's
mpirun sends it. That is MPI's contract. It lives on the head only (root, 0600, and read-only in the head's
container), logs in only from the head's link addresses (`from=`), and reaches no shell, no file and no command on
the worker host. The switch key can switch the worker among the worker releases staged on it, or back to
the release it served alone before the pair's first, nothing more.

Stdlib only; installed on the worker next to the host tool."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # installed next to the host tool and layout.py
from layout import HOST_TOOL, PAIR_GATE_TOOL, PAIR_SWITCH_FLAG, RELEASE_ID, Layout  # noqa: E402

# the worker's container restarting: its unit's RestartSec (30), then `docker run`; well inside the head unit's own
# RestartSec + the gate's timeout, so a relaunch waits here instead of failing and spending a start
CONTAINER_WAIT_SEC = 120
ORTED = "orted"
FLAGS = {"--daemonize", "--tree-spawn"}  # orted's flags in 4.1.4's launch line (no tree spawn: --daemonize)
MCA = {"-mca", "--mca"}
# The MCA parameters a pair launch puts on orted's line: those mpirun always adds (read from 4.1.4), and those the
# pair's launch sets on the head (OMPI_MCA_* in its environment or --mca on mpirun are forwarded to orted).
LAUNCH_PARAMS = {
    # mpirun's own (4.1.4)
    "ess", "ess_base_jobid", "ess_base_vpid", "ess_base_num_procs", "orte_node_regex", "orte_hnp_uri",
    "orte_parent_uri", "plm", "routed", "rmaps_base_mapping_policy", "pmix",
    # the pair launch's (the playbook's OMPI_MCA_* environment, and the rsh agent without tree spawn)
    "plm_rsh_agent", "plm_rsh_no_tree_spawn", "btl_tcp_if_include", "oob_tcp_if_include", "rmaps_ppr_n_pernode",
    "orte_default_hostfile",
}
PINNED = {"plm_rsh_agent"}  # parameters that name a program orted would run: only the pair's own value passes
KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")
VALUE = re.compile(r"[\x21-\x7e]{1,1024}")  # printable, no whitespace: ids, URIs, node regexes, interface lists
MAX_LINE = 8192


class Refused(ValueError):
    """The asked command is not a pair launch."""


def switch_argv(asked: str | None) -> list[str]:
    """The switch key's gate: the command that runs the asked switch, or Refused (why)."""
    words = _words(asked, "switches the pair")
    if words[0] != HOST_TOOL:
        raise Refused(f"{words[0]!r} is not {HOST_TOOL} (this key only switches the pair)")
    return _switch_argv(words)


def _words(asked: str | None, what: str) -> list[str]:
    if not asked or not asked.strip():
        raise Refused(f"no command (this key only {what})")
    if len(asked) > MAX_LINE:
        raise Refused(f"a command of {len(asked)} characters (at most {MAX_LINE})")
    try:
        return shlex.split(asked, comments=False, posix=True)
    except ValueError as e:
        raise Refused(f"not one command ({e})") from None


def launch_argv(asked: str | None, container: str, agent: str) -> list[str]:
    """The MPI key's gate: the command that runs the asked launch in `container`, or Refused (why)."""
    words = _words(asked, "launches the pair's MPI daemon")
    if words[0] != ORTED:
        raise Refused(f"{words[0]!r} is not {ORTED} (this key only launches the pair's MPI daemon)")
    return ["docker", "exec", "-i", container, ORTED, *_orted_args(words[1:], agent)]


def _switch_argv(words: list[str]) -> list[str]:
    """The head's switch: exactly Layout.pair_worker_words(ID), or Layout.pair_leave_words(ID) (the head's revert of
    a first pair release), run as the host tool installed beside the gate."""
    rid = words[2] if len(words) in (3, 4) else ""
    allowed = (Layout.pair_worker_words(rid), Layout.pair_leave_words(rid))
    if not re.fullmatch(RELEASE_ID, rid) or words not in allowed:
        forms = " or ".join(f"`{' '.join(f('ID'))}`" for f in (Layout.pair_worker_words, Layout.pair_leave_words))
        raise Refused(f"{HOST_TOOL}: only {forms} (ID a release id)")
    return [str(Path(__file__).resolve().parent / HOST_TOOL), *words[1:]]


def _orted_args(words: list[str], agent: str) -> list[str]:
    out, i = [], 0
    while i < len(words):
        word = words[i]
        if word in FLAGS:
            out.append(word)
            i += 1
            continue
        if word not in MCA:
            raise Refused(f"{word!r} is not an orted flag or -mca parameter of a launch")
        if i + 2 >= len(words):
            raise Refused(f"{word} without a KEY and a VALUE")
        key, value = words[i + 1], words[i + 2]
        if not KEY.fullmatch(key) or key not in LAUNCH_PARAMS:
            raise Refused(f"MCA parameter {key!r} is not one a pair launch sets")
        if not VALUE.fullmatch(value):
            raise Refused(f"MCA parameter {key}: a value with whitespace, a control character or over 1024 characters")
        if key in PINNED and value != agent:
            raise Refused(f"MCA parameter {key}: {value!r} is not the pair's ({agent})")
        out += [word, key, value]
        i += 3
    return out


def wait_running(container: str, seconds: float = CONTAINER_WAIT_SEC) -> bool:
    """Whether the worker's container runs, polled each second for `seconds` at most (docker inspect)."""
    deadline = time.monotonic() + seconds
    while True:
        got = subprocess.run(["docker", "inspect", "--format", "{{.State.Running}}", container],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if got.returncode == 0 and got.stdout.strip() == "true":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PAIR_GATE_TOOL, description=__doc__.split("\n\n")[0])
    ap.add_argument("--container", help="the worker's serving container (the MPI key's gate)")
    ap.add_argument("--agent", help="the rsh agent path the head's launch passes (plm_rsh_agent)")
    ap.add_argument(PAIR_SWITCH_FLAG, action="store_true", help="the switch key's gate: the head's switch only")
    args = ap.parse_args(argv)
    if not args.switch and not (args.container and args.agent):
        ap.error(f"--container and --agent (the MPI key's gate), or {PAIR_SWITCH_FLAG}")
    asked = os.environ.get("SSH_ORIGINAL_COMMAND")
    try:
        command = switch_argv(asked) if args.switch else launch_argv(asked, args.container, args.agent)
    except Refused as e:
        print(f"{PAIR_GATE_TOOL}: refused: {e}", file=sys.stderr)
        return 126
    if not args.switch and not wait_running(args.container):
        print(f"{PAIR_GATE_TOOL}: the container {args.container} is not running (waited {CONTAINER_WAIT_SEC}s)",
              file=sys.stderr)
        return 1
    os.execvp(command[0], command)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main())
