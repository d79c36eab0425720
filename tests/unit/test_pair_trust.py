"""A pair's MPI trust as the deploy writes it (pair/steps/trust.py), on pyinfra's @fake connector:
the key is generated on the head and its public half authorized on the worker in the same run, the worker's host
key is pinned on the head, a converged pair is only read (once per host), and a pair converges as one (the
preflight refuses a run with one of its hosts, or a worker whose host key cannot be pinned). What sshd makes of the
files is tests/unit/test_pair_ssh.py's (a real sshd)."""

from __future__ import annotations

import re

import gevent
import pytest
from pyinfra.api import Inventory
from pyinfra.connectors.fake import FakeConnector

from specfleet.fleet.steps.changes import changes
from specfleet.fleet.steps.state import current_plan
from specfleet.host.layout import HOST_KEY_FILE, NETPLAN_FILE, PAIR_HOME, PAIR_USER, SUDOERS_FILE
from specfleet.pair.steps.trust import pair_trust, remove_pair_trust
from specfleet.serving.steps.preflight import preflight
from tests.unit.fakehost import SPECFLEET_FACT, changed_ops, executed, make_plans, run_deploy, status_lines

HEAD_PUB = "ssh-ed25519 " + "A" * 68  # the head's MPI key, as an earlier run generated it
NEW_PUB = "ssh-ed25519 " + "C" * 68  # the key the head generates in this run
SWITCH_PUB = "ssh-ed25519 " + "D" * 68  # the head's switch key, as an earlier run generated it
NEW_SWITCH = "ssh-ed25519 " + "E" * 68  # the switch key the head generates in this run
WORKER_HOST_KEY = "ssh-ed25519 " + "B" * 68  # the worker's sshd host key
HEAD_LINK = '"192.168.100.10,192.168.101.10"'
GATE = "sudo -n /var/lib/specfleet/bin/pair-gate --container specfleet-trtllm --agent /opt/specfleet-pair/pair-agent"
SWITCH_GATE = "sudo -n /var/lib/specfleet/bin/pair-gate --switch"


def _switch_line(key: str) -> str:
    return f'restrict,from={HEAD_LINK},command="{SWITCH_GATE}" {key} specfleet-pair_a-switch\n'


def _plans(limit=("spark-1", "spark-2")):
    host = {"pair_role": "head", "image": "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"}
    plans = make_plans({"spark-1": {**host, "ssh_hostname": "10.0.0.11"},
                        "spark-2": {**host, "pair_role": "worker", "ssh_hostname": "10.0.0.12"}},
                       "qwen3_eagle3_pair", groups={"pair_a": ["spark-1", "spark-2"]})
    return {h: p for h, p in plans.items() if h in limit}


def _converged_trust(plan) -> list[str]:
    """The pair part of a converged pair host's status read (link and trust), as the status read reports it."""
    from specfleet.fleet.status import sha256
    from specfleet.pair.render import netplan
    from specfleet.pair.steps.trust import program

    s, lay = plan.settings, plan.paths
    text = netplan(s)
    link = [f"file\tdir|700|root|root\t{lay.pair_dir}", f"file\tfile|600|root|root|{sha256(text)}\t{NETPLAN_FILE}",
            f"file\tfile|600|root|root|{sha256(text)}\t{lay.netplan_staged}",
            f"file\tfile|755|root|root|{sha256(program('pair_link.py'))}\t{lay.pair_link_tool}"]
    link += [f"addr\t{i}\t{a}" for i, a in zip(s.pair_link_interfaces, s.pair_link_addresses, strict=True)]
    if s.pair_role == "head":
        link += [f"ping\t{i}\t{a.split('/')[0]}\tok" for i, a in zip(s.pair_link_interfaces, s.pair_peer_link_addresses,
                                                                                 strict=True)]
    return link + _trust_lines(plan)


def _trust_lines(plan) -> list[str]:
    from specfleet.fleet.status import sha256
    from specfleet.pair.render import authorized_keys, known_hosts, sudoers
    from specfleet.pair.steps.trust import program

    s, lay = plan.settings, plan.paths
    if s.pair_role == "head":
        pin = known_hosts(WORKER_HOST_KEY, s.pair_peer_link_addresses, 22)
        return [f"stat\tfile|600|root|root|411\t{lay.pair_key}", f"stat\tfile|600|root|root|411\t{lay.pair_switch_key}",
                f"file\tfile|644|root|root|{sha256(pin)}\t{lay.pair_known_hosts}",
                f"file\tfile|755|root|root|{sha256(program('pair_agent.sh'))}\t{lay.pair_agent}",
                f"file\tdir|700|root|root\t{lay.pair_switch_dir}",
                f"pubkey\t{lay.pair_key_pub}\t{HEAD_PUB} root@spark-1",
                f"pubkey\t{lay.pair_switch_key_pub}\t{SWITCH_PUB} specfleet-pair_a-switch"]
    auth = authorized_keys(HEAD_PUB, SWITCH_PUB, s.pair_peer_link_addresses, lay, s.pair)
    return [f"file\tdir|755|root|root\t{PAIR_HOME}", f"file\tdir|755|root|root\t{lay.pair_ssh_dir}",
            f"file\tfile|644|root|root|{sha256(auth)}\t{lay.pair_authorized_keys}",
            f"file\tfile|440|root|root|{sha256(sudoers(lay))}\t{SUDOERS_FILE}",
            f"file\tfile|755|root|root|{sha256(program('pair_gate.py'))}\t{lay.pair_gate}",
            f"file\tfile|755|root|root|{sha256(program('pair_agent.sh'))}\t{lay.pair_agent}",
            f"groups\t{PAIR_USER}\t{PAIR_USER}",
            f"pubkey\t{HOST_KEY_FILE}\t{WORKER_HOST_KEY} root@spark-2 (reinstalled 2026-11-01)"]


def _responses(fresh=(), drop=(), extra=None):
    """Fact answers per host: converged, but with no trust at all on the hosts in `fresh`, and without the status
    lines matching any pattern in `drop`."""
    def answer(plan):
        trust = [] if plan.settings.host in fresh else _converged_trust(plan)
        if plan.settings.host in fresh and plan.settings.pair_role == "worker":
            trust = [f"groups\t{PAIR_USER}\t(missing)", f"pubkey\t{HOST_KEY_FILE}\t{WORKER_HOST_KEY} root@spark-2"]
        link = [f"ifaces\tlo eth0 {' '.join(plan.settings.pair_link_interfaces)}", "addr\teth0\t10.0.0.11/24"]
        link += [f"link\t{i}\tup\t" for i in plan.settings.pair_link_interfaces]
        lines = [line for line in status_lines(plan) + link + trust if not any(re.search(d, line) for d in drop)]
        refused = {"exit 1": {"success": False, "stderr": "refused"}}  # first: a refusal may name ssh-keygen
        return {**refused, SPECFLEET_FACT: lines, "ssh-keygen": [f"{NEW_PUB} specfleet-pair_a", f"{NEW_SWITCH} specfleet-pair_a-switch"], **(extra or {})}
    return answer


@pytest.fixture
def uploads(monkeypatch):
    """Every file written, per host and path: uploads, and the root files written from stdin by an operation's
    function (jobs.write_root_file: `cat > <path>.specfleet-tmp ... mv -f ... <path>`)."""
    out: dict[tuple[str, str], str] = {}
    put, run = FakeConnector.put_file, FakeConnector.run_shell_command

    def put_file(self, filename_or_io, remote_filename, *args, **kwargs):
        filename_or_io.seek(0)
        out[(self.host.name.removeprefix("@fake/"), remote_filename)] = filename_or_io.read()
        return put(self, filename_or_io, remote_filename, *args, **kwargs)

    def run_shell_command(self, command, print_output=False, print_input=False, **arguments):
        text = str(command if isinstance(command, str) else command.get_masked_value())
        written = re.search(r"mv -f \S+\.specfleet-tmp (\S+?)'?$", text)
        if written and "_stdin" in arguments:
            out[(self.host.name.removeprefix("@fake/"), written.group(1))] = arguments["_stdin"]
        return run(self, command, print_output, print_input, **arguments)

    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
    return out


def test_a_fresh_pair_gets_a_key_generated_on_the_head_and_authorized_on_the_worker(uploads):
    plans = _plans()
    state = run_deploy(plans, pair_trust, responses=_responses(fresh=("spark-1", "spark-2")))
    assert not state.failed_hosts
    lay = plans["spark-2"].paths
    # the worker authorizes exactly the key the head printed in this run, from the head's link addresses only,
    # forced to the gate
    assert uploads[("spark-2", lay.pair_authorized_keys)] == (
        f'restrict,from={HEAD_LINK},command="{GATE}" {NEW_PUB} specfleet-pair_a\n'
        f'restrict,from={HEAD_LINK},command="{SWITCH_GATE}" {NEW_SWITCH} specfleet-pair_a-switch\n')
    # the head pins the worker's host key (read from the worker's status) at the worker's link addresses
    assert uploads[("spark-1", lay.pair_known_hosts)] == f"192.168.100.11,192.168.101.11 {WORKER_HOST_KEY}\n"
    head, worker = executed(state)["spark-1"], executed(state)["spark-2"]
    assert len([c for c in head if "ssh-keygen -q -t ed25519" in c]) == 1
    private = re.compile(rf"{re.escape(lay.pair_key)}(?!\.pub)")  # the private half: stat'ed, never read or sent
    assert not [c for c in head + worker if private.search(c.replace(f"-f {lay.pair_key} ", ""))
                and not c.startswith("DATA=")]
    assert [c for c in worker if "useradd" in c and PAIR_USER in c and PAIR_HOME in c]
    visudo = [c for c in worker if "visudo -c -f" in c]
    assert len(visudo) == 1 and f"mv -f {lay.sudoers_staged} {SUDOERS_FILE}" in visudo[0]
    assert uploads[("spark-2", lay.sudoers_staged)].endswith(f"{PAIR_USER} ALL=(root) NOPASSWD: SPECFLEET_PAIR_GATE\n")
    assert ("spark-2", SUDOERS_FILE) not in uploads  # sudo only ever sees a rule visudo accepted


def test_a_converged_pair_is_only_read_once_per_host():
    plans = _plans()
    state = run_deploy(plans, pair_trust, responses=_responses())
    assert changed_ops(state) == {"spark-1": [], "spark-2": []}
    # each host's one status read, although each host's steps also read the other's
    assert {h: len(cmds) for h, cmds in executed(state).items()} == {"spark-1": 1, "spark-2": 1}


def test_a_key_already_on_the_head_is_authorized_from_its_status_read(uploads):
    plans = _plans()
    lay = plans["spark-2"].paths
    state = run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_authorized_keys),)))
    assert changed_ops(state)["spark-1"] == []
    assert uploads[("spark-2", lay.pair_authorized_keys)].endswith(f" {HEAD_PUB} specfleet-pair_a\n" + _switch_line(SWITCH_PUB))
    assert not [c for c in executed(state)["spark-1"] if "ssh-keygen" in c]


def test_a_public_key_without_its_private_half_is_replaced_and_the_new_one_authorized(uploads):
    plans = _plans()
    lay = plans["spark-1"].paths
    state = run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_key) + "$",)))
    assert len([c for c in executed(state)["spark-1"] if "ssh-keygen -q -t ed25519" in c]) == 1
    assert uploads[("spark-2", lay.pair_authorized_keys)].endswith(f" {NEW_PUB} specfleet-pair_a\n" + _switch_line(NEW_SWITCH))
    assert _trust_changes(plans) == {
        "spark-1": [f"generate the pair's MPI key {lay.pair_key} and its switch key {lay.pair_switch_key}"],
        "spark-2": [f"write {lay.pair_authorized_keys} (the MPI and switch keys spark-1 generates)"]}


def test_the_worker_waits_for_a_slow_key_generation_on_the_head(uploads, monkeypatch):
    """Both hosts run the exchange as one operation at once; the head's ssh-keygen takes a while (a mechanism, not a
    race: the stand-in connector holds it 1 s), and the worker authorizes its key only once it exists."""
    run = FakeConnector.run_shell_command

    def slow_keygen(self, command, *args, **kwargs):
        if "ssh-keygen -q" in str(command if isinstance(command, str) else command.get_masked_value()):
            gevent.sleep(1.0)
        return run(self, command, *args, **kwargs)

    monkeypatch.setattr(FakeConnector, "run_shell_command", slow_keygen)
    plans = _plans()
    lay = plans["spark-1"].paths
    state = run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_key) + "$",)))
    assert not state.failed_hosts
    assert uploads[("spark-2", lay.pair_authorized_keys)].endswith(f" {NEW_PUB} specfleet-pair_a\n" + _switch_line(NEW_SWITCH))


def test_under_the_python_api_a_worker_ahead_of_the_head_fails_and_the_next_run_authorizes(uploads):
    """pyinfra's Python API numbers each host's operations: a head with more to do than its worker reaches its key
    generation later than the worker reaches its half. The worker fails with a line saying so and authorizes
    nothing; the head keeps its new key, which the next run authorizes from the head's status read."""
    plans = _plans()
    lay = plans["spark-1"].paths
    head_behind = (re.escape(lay.pair_key) + "$", re.escape(lay.pair_known_hosts), re.escape(lay.pair_agent))
    state = run_deploy(plans, pair_trust, responses=_responses(drop=head_behind))
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-2"]
    assert ("spark-2", lay.pair_authorized_keys) not in uploads
    assert len([c for c in executed(state)["spark-1"] if "ssh-keygen -q" in c]) == 1
    run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_authorized_keys),)))
    assert uploads[("spark-2", lay.pair_authorized_keys)].endswith(f" {HEAD_PUB} specfleet-pair_a\n" + _switch_line(SWITCH_PUB))


def test_a_failed_key_generation_authorizes_nothing_and_leaves_the_workers_key(uploads):
    plans = _plans()
    lay = plans["spark-1"].paths
    failing = {"ssh-keygen": {"success": False, "stderr": "ssh-keygen: No space left on device"}}
    state = run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_key) + "$",),
                                                               extra=failing))
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]
    assert ("spark-2", lay.pair_authorized_keys) not in uploads  # the worker still authorizes the earlier key only


def _refusals(state) -> dict[str, str]:
    """Each host's refusal line, unquoted (the refuse operation echoes it single-quoted)."""
    return {h: next((c for c in cmds if "exit 1" in c), "").replace("'\"'\"'", "'")
            for h, cmds in executed(state).items()}


def _trust_changes(plans) -> dict[str, list[str]]:
    """What `specfleet plan` lists for each host's MPI trust, decided inside a run as the converge decides it."""
    out: dict[str, list[str]] = {}

    def record():
        out[current_plan().settings.host] = changes(current_plan()).pair
    run_deploy(plans, record, responses=_responses(drop=(re.escape(plans["spark-1"].paths.pair_key) + "$",)))
    return out


def test_a_run_with_one_host_of_a_pair_is_refused_before_anything_changes():
    state = run_deploy(_plans(limit=("spark-1",)), preflight, responses=_responses(fresh=("spark-1",)))
    refusal = _refusals(state)["spark-1"]
    assert "spark-1: preflight: " in refusal
    assert "its pair pair_a converges as one, but this run does not have spark-2 (add it to --limit)" in refusal
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-1"]


def test_a_worker_without_an_ed25519_host_key_refuses_the_pair_on_both_hosts():
    plans = _plans()
    state = run_deploy(plans, preflight, responses=_responses(drop=(re.escape(HOST_KEY_FILE),)))
    refusals = _refusals(state)
    assert "sshd has no ed25519 host key in /etc/ssh/ssh_host_ed25519_key.pub" in refusals["spark-2"]
    assert "its pair's worker spark-2 fails its preflight" in refusals["spark-1"]
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]


def test_cleanup_removes_the_trust_it_finds_and_nothing_on_a_clean_pair():
    plans = _plans()
    lay = plans["spark-1"].paths
    state = run_deploy(plans, remove_pair_trust_deploy, responses=_responses())
    (head,), (worker,) = (executed(state)[h][1:] for h in ("spark-1", "spark-2"))  # after the status read
    assert head == (f"rm -f {lay.pair_key} {lay.pair_key_pub} {lay.pair_known_hosts} {lay.pair_agent} "
                    f"{lay.pair_switch_key} {lay.pair_switch_key_pub} && rm -rf {lay.pair_switch_dir}")
    # the key loses its authorization first, then its rule, then the login
    assert worker == (f"rm -f {lay.pair_authorized_keys} {SUDOERS_FILE} {lay.pair_gate} {lay.pair_agent} && "
                      f"{{ ! id -u {PAIR_USER} >/dev/null 2>&1 || userdel {PAIR_USER}; }} && rm -rf {PAIR_HOME}")
    clean = run_deploy(plans, remove_pair_trust_deploy, responses=_responses(fresh=("spark-1", "spark-2")))
    assert changed_ops(clean) == {"spark-1": [], "spark-2": []}


def remove_pair_trust_deploy():
    remove_pair_trust(current_plan())


def test_in_a_cli_run_the_exchange_is_one_operation_even_with_a_head_behind(uploads):
    """As `pyinfra inventory.py deploys/...` runs it (operations identified by where they are called): the head
    has more to do before its key than the worker before its half, and still the worker authorizes the new key
    (under the Python API the same case fails the worker: the test above)."""
    plans = _plans()
    lay = plans["spark-1"].paths
    head_behind = (re.escape(lay.pair_key) + "$", re.escape(lay.pair_known_hosts), re.escape(lay.pair_agent))
    state = run_deploy(plans, pair_trust, responses=_responses(drop=head_behind), cli=True)
    assert not state.failed_hosts
    assert uploads[("spark-2", lay.pair_authorized_keys)].endswith(f" {NEW_PUB} specfleet-pair_a\n" + _switch_line(NEW_SWITCH))


def test_with_serial_hosts_the_worker_first_fails_with_a_line_instead_of_waiting(caplog, monkeypatch):
    """pyinfra --serial runs one host's operations after the other's: a worker run first cannot wait for a head
    that has not started (it would wait forever); it fails at once with a line saying what to do."""
    active = Inventory.get_active_hosts  # pyinfra's serial order is its set of active hosts: make it worker first
    monkeypatch.setattr(Inventory, "get_active_hosts", lambda self: sorted(active(self), key=lambda h: h.name)[::-1])
    plans = _plans()
    lay = plans["spark-1"].paths
    state = run_deploy(plans, pair_trust, responses=_responses(drop=(re.escape(lay.pair_key) + "$",)), serial=True)
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-2"]
    assert "spark-1 generated no MPI key in this operation" in caplog.text and "--serial" in caplog.text


def test_a_converged_pair_passes_the_preflight_whatever_comment_its_host_key_has():
    """sshd's host key file ends with any comment (root@<name>, edited by hand): only the key is pinned, and the
    preflight does not take a comment it does not expect for a missing key."""
    state = run_deploy(_plans(), preflight, responses=_responses())
    assert _refusals(state) == {"spark-1": "", "spark-2": ""} and not state.failed_hosts
