"""A two-Spark pair's trust: the head's two keys (the MPI key, which its serving container
mounts for mpirun, and the switch key, which no container sees), the worker's login that lets each key run its own
line of the pair gate and nothing else, and the head's pin of the worker's host key (pair_files renders the files).

Two kinds of public values cross between the hosts: the head's public keys (into the worker's authorized_keys) and the
worker's ed25519 host key (into the head's known_hosts). Each comes from its own host's one status read, which the
other host's steps read too (state.host_status with `on`: through that host's connection, still once per run). A
head without a key generates it in the run, in ONE operation called from one place for both hosts (_exchange): in a
CLI run pyinfra identifies operations by where they are called, so both run it at once and the worker waits for the
head's new public half (fleet/steps/coordination.py; mirror/steps/hub.py's warm-up does the same). The private key never
leaves the head, and no command reads it. A pair converges as one: the preflight refuses a run that has only one of
its hosts."""

from __future__ import annotations

import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from io import StringIO

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import files, python, server

from ...fleet.programs import program_text
from ...fleet.status import HostStatus, Want, sha256
from ...fleet.steps.coordination import SharedOperation, Slot
from ...fleet.steps.jobs import run_on_host, write_root_file
from ...fleet.steps.state import current_plan, host_status, pair_peer
from ...host.layout import HOST_KEY_FILE, PAIR_HOME, PAIR_USER, SUDOERS_FILE
from ...plan import HostPlan
from ..render import authorized_keys, known_hosts, pair_group, public_key, sudoers

# pair -> its key exchange: the hosts that added it, and what the head publishes (its new public keys, or None)
_EXCHANGES: Slot[defaultdict[str, SharedOperation[tuple[str, str] | None]]] = \
    Slot("pair key exchanges", lambda: defaultdict(SharedOperation))
KEY_FILE = ("file", "600", "root", "root")  # the head's private key: root's alone, only stat'ed (never opened)
ROOT_DIR = Want("dir")  # the worker's PAIR_HOME and its .ssh: root-owned, so the MPI login cannot change its key


@dataclass
class Trust:
    """What the MPI trust needs on one pair host, decided from both hosts' status reads (`specfleet plan`, the run
    lock and the step decide the same way)."""

    login: bool = False  # worker: create PAIR_USER
    dirs: list[str] = field(default_factory=list)  # worker: PAIR_HOME and its .ssh to create, root-owned
    writes: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # path -> (mode, content, operation name)
    sudoers: str | None = None  # worker: the rule to check with visudo and install
    exchange: str | None = None  # head: generate the key; worker: authorize the key the head generates (the path)

    def lines(self, plan: HostPlan) -> list[str]:
        out = [f"create the pair's MPI login {PAIR_USER}"] if self.login else []
        out += [f"create {path}" for path in self.dirs] + [f"write {path}" for path in self.writes]
        out += [f"write {SUDOERS_FILE} (checked by visudo first)"] if self.sudoers is not None else []
        if self.exchange and plan.settings.pair_role == "head":
            out.append(f"generate the pair's MPI key {self.exchange} and its switch key {plan.paths.pair_switch_key}")
        elif self.exchange:
            out.append(f"write {self.exchange} (the MPI and switch keys {plan.settings.pair_peer} generates)")
        return out


def head_key(plan: HostPlan, st: HostStatus) -> tuple[str, str] | None:
    """The head's MPI and switch public keys as its status read reports them (None: not both usable, the run
    generates both)."""
    lay = plan.paths
    keys = []
    for private, public in ((lay.pair_key, lay.pair_key_pub), (lay.pair_switch_key, lay.pair_switch_key_pub)):
        found = st.files.stats.get(private)
        usable = found is not None and found[:4] == KEY_FILE and found[4].isdigit() and int(found[4]) > 0
        keys.append(public_key(st.files.pubkeys.get(public)) if usable else None)
    return (keys[0], keys[1]) if keys[0] and keys[1] else None


def worker_host_key(st: HostStatus) -> str | None:
    return public_key(st.files.pubkeys.get(HOST_KEY_FILE), host_key=True)


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


def program(source: str) -> str:
    return program_text(source)


def _write(t: Trust, st: HostStatus, path: str, mode: str, content: str, what: str) -> None:
    if not Want("file", mode, sha256=sha256(content)).matches(st.files.found.get(path)):
        t.writes[path] = (mode, content, what)


def trust(plan: HostPlan) -> Trust | None:
    """What this pair host's MPI trust needs (None: not a pair host, or its pair is not in this run, which the
    preflight refuses)."""
    peer = pair_peer(plan) if plan.settings.pair else None
    if peer is None:
        return None
    peer_plan, peer_host = peer
    s, lay, st, peer_st = plan.settings, plan.paths, host_status(plan), host_status(peer_plan, on=peer_host)
    t = Trust()
    if s.pair_role == "head":
        t.exchange = lay.pair_key if head_key(plan, st) is None else None
        pinned = worker_host_key(peer_st)
        if pinned is not None:  # else the preflight refused the pair (trust_problems)
            _write(t, st, lay.pair_known_hosts, "644", known_hosts(pinned, s.pair_peer_link_addresses, s.pair_ssh_port),
                   f"Pin {s.pair_peer}'s SSH host key at its link addresses")
        _write(t, st, lay.pair_agent, "755", program("pair_agent.sh"), "Install pair-agent (mpirun's rsh agent)")
        return t
    # the agent's path must exist in the worker's container too (render.docker_run_args); without a key it is inert
    _write(t, st, lay.pair_agent, "755", program("pair_agent.sh"), "Install pair-agent (orted checks its path)")
    t.login = st.files.groups.get(PAIR_USER) is None
    t.dirs = [path for path in (PAIR_HOME, lay.pair_ssh_dir) if not ROOT_DIR.matches(st.files.found.get(path))]
    _write(t, st, lay.pair_gate, "755", program("pair_gate.py"), "Install pair-gate (the MPI key's forced command)")
    rule = sudoers(lay)
    t.sudoers = None if Want("file", "440", sha256=sha256(rule)).matches(st.files.found.get(SUDOERS_FILE)) else rule
    key = head_key(peer_plan, peer_st)
    if key is None:
        t.exchange = lay.pair_authorized_keys
    else:
        _write(t, st, lay.pair_authorized_keys, "644", _authorized(plan, key),
               f"Authorize {s.pair_peer}'s MPI and switch keys")
    return t


@deploy("Pair trust")
def pair_trust() -> None:
    plan = current_plan()
    t = trust(plan)
    if t is None:
        return
    s, lay = plan.settings, plan.paths
    # the pair directory (root 0700) is the link step's, which runs first (pair/steps/link.py)
    if t.login:
        # password "*": no password matches it, and unlike useradd's "!" sshd does not read it as a locked account
        # where PAM is off; the key's forced command is the only thing the login runs
        server.shell(name=f"The pair's MPI login {PAIR_USER} (system user, no password, forced to the pair gate)",
                     commands=[f"id -u {PAIR_USER} >/dev/null 2>&1 || useradd --system --no-create-home --home-dir "
                               f"{PAIR_HOME} --shell /bin/sh --password '*' {PAIR_USER}"])
    for path in t.dirs:
        files.directory(name=f"{path} (root-owned)", path=path, user="root", group="root", mode="755")
    for path, (mode, content, what) in t.writes.items():
        files.put(name=what, src=StringIO(content), dest=path, user="root", group="root", mode=mode)
    if t.sudoers is not None:
        files.put(name="Stage the pair's sudoers rule", src=StringIO(t.sudoers), dest=lay.sudoers_staged,
                  user="root", group="root", mode="440")
        staged = shlex.quote(lay.sudoers_staged)
        server.shell(name="Install the pair's sudoers rule once visudo accepts it",
                     commands=[f"visudo -c -f {staged} && mv -f {staged} {shlex.quote(SUDOERS_FILE)}"])
    if t.exchange:
        # ONE call site for both hosts: in a CLI run (operations identified by where they are called) this is one
        # operation, run on both at once; the worker waits for the head's new key (mirror/steps/hub.py does the same)
        python.call(name=f"Pair trust: {s.pair}'s head generates its MPI key, the worker authorizes it",
                    function=_exchange)
        _EXCHANGES()[pair_group(s)].added(host)


def _authorized(plan: HostPlan, keys: tuple[str, str]) -> str:
    s = plan.settings
    return authorized_keys(*keys, s.pair_peer_link_addresses, plan.paths, pair_group(s))


KEY_WAIT_SEC = 120  # how long the worker waits for the head's new key (ssh-keygen takes a moment; SSH may lag)


def _keygen(lay, pair: str) -> str:
    """The head's two keys, generated afresh (root 0600), their public halves printed: the MPI key in the pair
    directory (the serving container's), the switch key in a directory of its own (no container's)."""
    steps = [f"umask 077 && mkdir -p {shlex.quote(lay.pair_switch_dir)}"]
    for key, comment in ((lay.pair_key, f"specfleet-{pair}"), (lay.pair_switch_key, f"specfleet-{pair}-switch")):
        key, comment = shlex.quote(key), shlex.quote(comment)
        steps.append(f"rm -f {key} {key}.pub && ssh-keygen -q -t ed25519 -N '' -C {comment} -f {key}")
    return " && ".join(steps) + f" && cat {shlex.quote(lay.pair_key_pub)} {shlex.quote(lay.pair_switch_key_pub)}"


def _exchange(state, host) -> bool:
    """The head: generate the key and publish its public half. The worker: wait for it, then authorize it."""
    plan = host.data.get("specfleet")
    s, lay = plan.settings, plan.paths
    ex = _EXCHANGES(state)[s.pair]
    if s.pair_role == "head":
        out: list[str]
        ok, out, err = False, [], ["no output"]
        try:  # the keys (or None) are published whatever happens: the worker waits for them
            ok, out, err = run_on_host(state, host, _keygen(lay, s.pair))
        finally:
            keys = [public_key(line) for line in (out[-2:] if ok and len(out) >= 2 else [])]
            new = (keys[0], keys[1]) if len(keys) == 2 and keys[0] and keys[1] else None
            ex.publish(host, new)
        if new is None:
            logger.error(f"{host.print_prefix}the pair's keys were not generated: {(err or out or ['?'])[-1]}")
        return new is not None
    head = next((h for h in ex.hosts(state) if h is not host), None)
    why = ex.wait(state, host, head, KEY_WAIT_SEC)
    key = ex.results.get(head.name) if head is not None else None
    if key is None:
        logger.error(f"{host.print_prefix}{s.pair_peer} generated no MPI key " + {
            "failed": "(it failed): nothing authorized",
            "timeout": f"within {KEY_WAIT_SEC} s: nothing authorized",
        }.get(why, "in this operation, so none is authorized here (pyinfra's Python API numbers each host's "
                   "operations, and --serial runs one host after the other: run the converge again, which "
                   "authorizes the key from the head's status read)"))
        return False
    return write_root_file(state, host, lay.pair_authorized_keys, _authorized(plan, key), "644")


def remove_pair_trust(plan: HostPlan) -> None:
    """Cleanup: what pair_trust added on this pair host, as its status read found it, in one command. The worker
    loses the key's authorization first, then the sudoers rule, the login and its home; the head its key (both
    halves), the pin and the agent."""
    s, lay, st = plan.settings, plan.paths, host_status(plan)
    if not s.pair:
        return
    if s.pair_role == "head":
        seen = (st.files.found, st.files.stats, st.files.pubkeys)
        gone = [p for p in (lay.pair_key, lay.pair_key_pub, lay.pair_known_hosts, lay.pair_agent, lay.pair_switch_key,
                            lay.pair_switch_key_pub) if any(p in found for found in seen)]
        steps = [f"rm -f {' '.join(map(shlex.quote, gone))}"] if gone else []
        if lay.pair_switch_dir in st.files.found:
            steps.append(f"rm -rf {shlex.quote(lay.pair_switch_dir)}")
    else:
        gone = [p for p in (lay.pair_authorized_keys, SUDOERS_FILE, lay.sudoers_staged, lay.pair_gate, lay.pair_agent)
                if p in st.files.found]
        steps = [f"rm -f {' '.join(map(shlex.quote, gone))}"] if gone else []
        if st.files.groups.get(PAIR_USER) is not None:
            steps.append(f"{{ ! id -u {PAIR_USER} >/dev/null 2>&1 || userdel {PAIR_USER}; }}")
        if PAIR_HOME in st.files.found:
            steps.append(f"rm -rf {shlex.quote(PAIR_HOME)}")
    if steps:
        server.shell(name=f"Remove the pair's MPI trust ({len(gone)} file(s)"
                          f"{', the login' if st.files.groups.get(PAIR_USER) is not None else ''})",
                     commands=[" && ".join(steps)])
