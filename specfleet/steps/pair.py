"""A two-Spark pair's MPI trust (issue 19, point 3): the head's MPI key, the worker's login that lets that key run
the pair gate and nothing else, and the head's pin of the worker's host key (pair_files renders the files).

Two public values cross between the hosts: the head's public key (into the worker's authorized_keys) and the
worker's ed25519 host key (into the head's known_hosts). Each comes from its own host's one status read, which the
other host's steps read too (state.host_status with `on`: through that host's connection, still once per run). A
head without a key generates it during the run; its public half then reaches the worker through that operation's
output, in an operation pyinfra runs after it: the head's operations come from earlier lines of this module, and
pyinfra runs each operation on every host before the next. The private key never leaves the head, and no command
reads it. A pair converges as one: the preflight refuses a run that has only one of its hosts."""

from __future__ import annotations

import shlex
from importlib import resources
from io import StringIO
from typing import Callable
from weakref import WeakKeyDictionary

from pyinfra.api import deploy
from pyinfra.context import ctx_state
from pyinfra.operations import files, python, server

from ..facts import HostStatus
from ..host.layout import HOST_KEY_FILE, PAIR_HOME, PAIR_USER, SUDOERS_FILE
from ..pair_files import authorized_key, gate_command, known_hosts, public_key, sudoers
from ..plan import HostPlan
from .state import Want, current_plan, host_status, pair_peer, sha256

_KEY_OPS: WeakKeyDictionary = WeakKeyDictionary()  # pyinfra State -> {pair: the head's key generation (OperationMeta)}
KEY_FILE = Want("file", "600")  # the head's private key: root's alone (its content is never read)
ROOT_DIR = Want("dir")  # the worker's PAIR_HOME and its .ssh: root-owned, so the MPI login cannot change its key


def head_key(plan: HostPlan, st: HostStatus) -> str | None:
    """The head's MPI public key as its status read reports it (None: no usable key, the run generates one)."""
    lay = plan.paths
    return public_key(st.pubkeys.get(lay.pair_key_pub)) if KEY_FILE.matches(st.files.get(lay.pair_key)) else None


def worker_host_key(st: HostStatus) -> str | None:
    return public_key(st.pubkeys.get(HOST_KEY_FILE))


def trust_problems(plan: HostPlan, st: HostStatus) -> list[str]:
    """What refuses a pair host before anything changes on either host: a run without its other host, a worker
    without an ed25519 host key to pin, or its other host's own refusal (a pair converges as one)."""
    s = plan.settings
    peer = pair_peer(plan)
    if peer is None:
        return [f"its pair {s.pair} converges as one, but this run does not have {s.pair_peer} (add it to --limit)"]
    problems = []
    if s.pair_role == "worker" and worker_host_key(st) is None:
        problems.append(f"sshd has no ed25519 host key in {HOST_KEY_FILE} for the pair's head to pin "
                        "(create it with `ssh-keygen -A` and restart ssh)")
    return problems


def _program(source: str) -> str:
    return (resources.files("specfleet.host") / source).read_text(encoding="utf-8")


Action = tuple[str, Callable[[], object]]  # (what `specfleet plan` lists, the operation that does it)


def _put(st: HostStatus, path: str, mode: str, content: str, what: str) -> list[Action]:
    """Write one root-owned file when the status read shows it differs (no secret: these are all public)."""
    if Want("file", mode, sha256=sha256(content)).matches(st.files.get(path)):
        return []
    return [(f"write {path}", lambda: files.put(name=what, src=StringIO(content), dest=path, user="root",
                                                group="root", mode=mode))]


def trust_actions(plan: HostPlan) -> list[Action]:
    """What the MPI trust needs on this pair host, decided from the two hosts' status reads (empty: nothing)."""
    peer = pair_peer(plan) if plan.settings.pair else None
    if peer is None:
        return []  # not a pair host, or the preflight refused it: its pair is not in this run
    peer_plan, peer_host = peer
    if plan.settings.pair_role == "head":
        return _head(plan, host_status(peer_plan, on=peer_host))
    return _worker(plan, peer_plan, host_status(peer_plan, on=peer_host))


@deploy("Pair trust")
def pair_trust() -> None:
    for _, operation in trust_actions(current_plan()):
        operation()


def _head(plan: HostPlan, worker_st: HostStatus) -> list[Action]:
    s, lay, st = plan.settings, plan.paths, host_status(plan)
    out: list[Action] = []
    if not Want("dir", "700").matches(st.files.get(lay.pair_dir)):
        out.append((f"create {lay.pair_dir}", lambda: files.directory(
            name="The pair's directory (root only)", path=lay.pair_dir, user="root", group="root", mode="700")))
    if head_key(plan, st) is None:
        key = shlex.quote(lay.pair_key)

        def keygen() -> None:
            _KEY_OPS.setdefault(ctx_state.get(), {})[s.pair] = server.shell(
                name=f"Generate the pair's MPI key (ed25519, root only; {s.pair_peer} authorizes its public half)",
                commands=[f"umask 077 && rm -f {key} {key}.pub && ssh-keygen -q -t ed25519 -N '' "
                          f"-C {shlex.quote('specfleet-' + s.pair)} -f {key} && cat {key}.pub"])
        out.append((f"generate the pair's MPI key {lay.pair_key}", keygen))
    pinned = worker_host_key(worker_st)
    if pinned is not None:  # else the preflight refused the pair (trust_problems)
        out += _put(st, lay.pair_known_hosts, "644", known_hosts(pinned, s.pair_peer_link_addresses, s.pair_ssh_port),
                    f"Pin {s.pair_peer}'s SSH host key at its link addresses")
    return out + _put(st, lay.pair_agent, "755", _program("pair_agent.sh"), "Install pair-agent (mpirun's rsh agent)")


def _worker(plan: HostPlan, head_plan: HostPlan, head_st: HostStatus) -> list[Action]:
    s, lay, st = plan.settings, plan.paths, host_status(plan)
    out: list[Action] = []
    if st.groups.get(PAIR_USER) is None:
        # password "*": no password matches it, and unlike useradd's "!" sshd does not read it as a locked account
        # where PAM is off; the key's forced command is the only thing the login runs
        out.append((f"create the pair's MPI login {PAIR_USER}", lambda: server.shell(
            name=f"The pair's MPI login {PAIR_USER} (system user, no password, forced to the pair gate)",
            commands=[f"id -u {PAIR_USER} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir "
                      f"{PAIR_HOME} --shell /bin/sh --password '*' {PAIR_USER}"])))
    for path in (PAIR_HOME, lay.pair_ssh_dir):
        if not ROOT_DIR.matches(st.files.get(path)):
            out.append((f"create {path}", lambda path=path: files.directory(
                name=f"{path} (root-owned)", path=path, user="root", group="root", mode="755")))
    out += _put(st, lay.pair_gate, "755", _program("pair_gate.py"), "Install pair-gate (the MPI key's forced command)")
    rule = sudoers(lay)
    if not Want("file", "440", sha256=sha256(rule)).matches(st.files.get(SUDOERS_FILE)):
        out.append((f"write {SUDOERS_FILE} (checked by visudo first)", lambda: _install_sudoers(lay, rule)))
    key = head_key(head_plan, head_st)
    if key is not None:
        return out + _put(st, lay.pair_authorized_keys, "644", _authorized(plan, key),
                          f"Authorize {s.pair_peer}'s MPI key")
    return out + [(f"write {lay.pair_authorized_keys} (the MPI key {s.pair_peer} generates)", lambda: python.call(
        name=f"Authorize the MPI key {s.pair_peer} generates in this run", function=_authorize_new, plan=plan))]


def _install_sudoers(lay, rule: str) -> None:
    files.put(name="Stage the pair's sudoers rule", src=StringIO(rule), dest=lay.sudoers_staged, user="root",
              group="root", mode="440")
    staged = shlex.quote(lay.sudoers_staged)
    server.shell(name="Install the pair's sudoers rule once visudo accepts it",
                 commands=[f"visudo -cq -f {staged} && mv -f {staged} {shlex.quote(SUDOERS_FILE)}"])


def _authorized(plan: HostPlan, key: str) -> str:
    s = plan.settings
    return authorized_key(key, s.pair_peer_link_addresses, gate_command(plan.paths), s.pair)


def _authorize_new(plan: HostPlan) -> None:
    """At run time, after the head's key generation: authorize the public half it printed."""
    op = _KEY_OPS.get(ctx_state.get(), {}).get(plan.settings.pair)
    lines = op.stdout_lines if op is not None and op.is_complete() and op.did_succeed() else []
    key = public_key(lines[-1] if lines else None)
    if key is None:
        raise RuntimeError(f"{plan.settings.pair_peer} generated no MPI key in this run; nothing authorized")
    files.put(name=f"Authorize {plan.settings.pair_peer}'s MPI key", src=StringIO(_authorized(plan, key)),
              dest=plan.paths.pair_authorized_keys, user="root", group="root", mode="644")


def remove_pair_trust(plan: HostPlan) -> None:
    """Cleanup: what pair_trust added on this pair host, as its status read found it, in one command. The worker
    loses the key's authorization first, then the sudoers rule, the login and its home; the head its key (both
    halves), the pin and the agent."""
    s, lay, st = plan.settings, plan.paths, host_status(plan)
    if not s.pair:
        return
    if s.pair_role == "head":
        gone = [p for p in (lay.pair_key, lay.pair_key_pub, lay.pair_known_hosts, lay.pair_agent)
                if p in st.files or p in st.pubkeys]
        steps = [f"rm -f {' '.join(map(shlex.quote, gone))}"] if gone else []
    else:
        gone = [p for p in (lay.pair_authorized_keys, SUDOERS_FILE, lay.sudoers_staged, lay.pair_gate) if p in st.files]
        steps = [f"rm -f {' '.join(map(shlex.quote, gone))}"] if gone else []
        if st.groups.get(PAIR_USER) is not None:
            steps.append(f"{{ ! id -u {PAIR_USER} >/dev/null 2>&1 || userdel {PAIR_USER}; }}")
        if PAIR_HOME in st.files:
            steps.append(f"rm -rf {shlex.quote(PAIR_HOME)}")
    if steps:
        server.shell(name=f"Remove the pair's MPI trust ({len(gone)} file(s)"
                          f"{', the login' if st.groups.get(PAIR_USER) is not None else ''})",
                     commands=[" && ".join(steps)])
