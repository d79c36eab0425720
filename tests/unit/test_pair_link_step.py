"""A pair's link as the deploy applies it (pair/steps/link.py), on pyinfra's @fake connector:
the netplan staged and applied by the host's pair-link, confirmed by the controller's next command, then pinged
across from the head; a link in place is only read; a refusal or a failure stops the host with pair-link's own
line; and the preflight refuses a configured link that is down or does not answer, on both hosts. What pair-link
does on a host (netplan try, the revert) is tests/unit/test_pair_link.py's."""

from __future__ import annotations

import logging
import re

import pytest
from pyinfra.api import Inventory

from specfleet.fleet.steps.state import current_plan
from specfleet.host.layout import NETPLAN_FILE
from specfleet.pair.render import netplan
from specfleet.pair.steps.link import pair_link, remove_pair_link
from specfleet.serving.steps.preflight import preflight
from tests.unit.fakehost import SPECFLEET_FACT, changed_ops, executed, run_deploy
from tests.unit.test_pair_trust import _plans, _refusals, _responses, uploads  # noqa: F401 (a fixture)

APPLY = re.compile(r"/bin/pair-link --data-dir /var/lib/specfleet apply ")
CONFIRM = re.compile(r"/bin/pair-link --data-dir /var/lib/specfleet confirm$")
PING = re.compile(r"^ping -n -q -c 3 ")


def _unconfigured(plans) -> tuple[str, ...]:
    """Status lines to drop so that neither host has the link: no netplan file, no staged copy, no addresses."""
    lay = plans["spark-1"].paths
    return (re.escape(NETPLAN_FILE), re.escape(lay.netplan_staged), r"^addr\tenp|^addr\tenP")


def _with_line(role: str, drop: str, line: str):
    """Converged answers, with one status line of the host in `role` replaced by `line`."""
    def answer(plan):
        out = _responses(drop=(drop,))(plan)
        if plan.settings.pair_role == role:
            out[SPECFLEET_FACT] = out[SPECFLEET_FACT] + [line]
        return out
    return answer


def test_a_new_link_is_staged_applied_confirmed_and_pinged_from_the_head(uploads):  # noqa: F811
    plans = _plans()
    state = run_deploy(plans, pair_link, responses=_responses(drop=_unconfigured(plans)))
    assert not state.failed_hosts
    for name, plan in plans.items():
        cmds = executed(state)[name]
        assert uploads[(name, plan.paths.netplan_staged)] == netplan(plan.settings)
        apply = [i for i, c in enumerate(cmds) if APPLY.search(c)]
        confirm = [i for i, c in enumerate(cmds) if CONFIRM.search(c)]
        assert len(apply) == 1 and confirm == [apply[0] + 1]  # confirmed by the very next command
        addresses = ",".join(plan.settings.pair_link_addresses)
        assert cmds[apply[0]].endswith(f"apply --interfaces enp1s0f1np1,enP2p1s0f1np1 --addresses {addresses} "
                                       "--confirm-sec 60")
    head = executed(state)["spark-1"]
    pings = [c for c in head if PING.search(c)]
    assert pings == ["ping -n -q -c 3 -W 2 -I enp1s0f1np1 192.168.100.11",
                     "ping -n -q -c 3 -W 2 -I enP2p1s0f1np1 192.168.101.11"]
    assert head.index(pings[0]) > max(i for i, c in enumerate(head) if CONFIRM.search(c))
    assert not [c for c in executed(state)["spark-2"] if PING.search(c)]


def test_a_link_in_place_is_only_read():
    state = run_deploy(_plans(), pair_link, responses=_responses())
    assert changed_ops(state) == {"spark-1": [], "spark-2": []}
    assert {h: len(cmds) for h, cmds in executed(state).items()} == {"spark-1": 1, "spark-2": 1}


def test_a_refused_apply_stops_the_host_with_pair_links_line_and_is_never_confirmed(caplog):
    line = ("/etc/netplan/60-specfleet-pair.yaml: the link would change enp1s0f1np1, which carries this host's SSH "
            "connection (a management interface); nothing was changed")
    plans = _plans()
    refused = {APPLY: {"success": False, "stderr": line}}
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        state = run_deploy(plans, pair_link, responses=_responses(drop=_unconfigured(plans), extra=refused))
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]
    assert not [c for cmds in executed(state).values() for c in cmds if CONFIRM.search(c) or PING.search(c)]
    assert f"pair link apply: {line}" in caplog.text


def test_the_head_does_not_check_a_link_whose_worker_side_failed(caplog):
    plans = _plans()

    def responses(plan):
        extra = {APPLY: {"success": False, "stderr": "pair-link: netplan try did not apply the link: ..."}}
        return _responses(drop=_unconfigured(plans), extra=extra if plan.settings.pair_role == "worker" else {})(plan)
    state = run_deploy(plans, pair_link, responses=responses)
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]
    assert not [c for c in executed(state)["spark-1"] if PING.search(c)]
    assert "spark-2's side of the link is not applied (its apply failed); not checked" in caplog.text


def test_a_link_that_does_not_answer_after_the_apply_fails_the_head(caplog):
    plans = _plans()
    silent = {PING: {"success": False, "stdout": "1 packets transmitted, 0 received, 100% packet loss, time 0ms"}}
    state = run_deploy(plans, pair_link, responses=_responses(drop=_unconfigured(plans), extra=silent))
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-1"]
    assert "ping 192.168.100.11 (spark-2) over enp1s0f1np1: 1 packets transmitted, 0 received" in caplog.text


@pytest.mark.parametrize("role, drop, line, refusal, other", [
    ("worker", r"^link\tenP2p1s0f1np1\t", "link\tenP2p1s0f1np1\tdown\t",
     "pair_link_interfaces: enP2p1s0f1np1 is down (allowed: up at both ends; check the cable and "
     "`ip link show enP2p1s0f1np1`)", "its pair's worker spark-2 fails its preflight"),
    ("head", r"^ping\tenp1s0f1np1\t", "ping\tenp1s0f1np1\t192.168.100.11\tfail",
     "pair_link_addresses: 192.168.100.11 (spark-2) does not answer a ping over enp1s0f1np1 (allowed: a link that "
     "answers at both ends; check `ip addr show enp1s0f1np1` on spark-2)", "its pair's head spark-1 fails its preflight"),
])
def test_a_configured_link_that_is_down_or_silent_refuses_the_pair_before_anything_changes(role, drop, line, refusal,
                                                                                            other):
    plans = _plans()
    state = run_deploy(plans, preflight, responses=_with_line(role, drop, line))
    refusals = _refusals(state)
    refused, peer = ("spark-2", "spark-1") if role == "worker" else ("spark-1", "spark-2")
    assert refusal in refusals[refused] and other in refusals[peer]
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-1", "@fake/spark-2"]


def test_a_link_file_in_place_without_its_addresses_is_applied_again(uploads):  # noqa: F811
    plans = _plans()
    state = run_deploy(plans, pair_link, responses=_responses(drop=(r"^addr\tenP2p1s0f1np1",)))
    for name in plans:
        assert len([c for c in executed(state)[name] if APPLY.search(c)]) == 1
    assert not uploads  # the staged netplan is current: applied as it is


def test_cleanup_removes_the_link_file_its_addresses_and_the_pair_directory_only():
    plans = _plans()
    state = run_deploy(plans, remove_pair_link_deploy, responses=_responses())
    for name, plan in plans.items():
        lay, (a1, a2) = plan.paths, plan.settings.pair_link_addresses
        assert executed(state)[name][1:] == [
            f"rm -f {NETPLAN_FILE} && rm -f {lay.pair_link_tool} && "
            "{ ! command -v netplan >/dev/null || netplan generate; } && "
            f"{{ ip addr del {a1} dev enp1s0f1np1 || true; }} && "
            f"{{ ip addr del {a2} dev enP2p1s0f1np1 || true; }} && rm -rf {lay.pair_dir}"]
    clean = run_deploy(plans, remove_pair_link_deploy, responses=_responses(drop=_unconfigured(plans) + (
        re.escape(plans["spark-1"].paths.pair_link_tool), r"\t/var/lib/specfleet/pair$")))
    assert changed_ops(clean) == {"spark-1": [], "spark-2": []}


def remove_pair_link_deploy():
    remove_pair_link(current_plan())


def test_in_a_cli_run_both_apply_in_one_operation_and_the_head_pings_after_the_worker(uploads):  # noqa: F811
    plans = _plans()
    state = run_deploy(plans, pair_link, responses=_responses(drop=_unconfigured(plans)), cli=True)
    assert not state.failed_hosts
    assert len([c for c in executed(state)["spark-1"] if PING.search(c)]) == 2


def test_with_serial_hosts_the_head_first_does_not_wait_for_the_worker(caplog, monkeypatch):
    """pyinfra --serial, the head first: its side applied, it cannot wait for a worker that has not started; it
    says the next preflight pings across, and the worker then applies its side."""
    active = Inventory.get_active_hosts  # pyinfra's serial order is its set of active hosts: make it head first
    monkeypatch.setattr(Inventory, "get_active_hosts", lambda self: sorted(active(self), key=lambda h: h.name))
    plans = _plans()
    state = run_deploy(plans, pair_link, responses=_responses(drop=_unconfigured(plans)), serial=True)
    assert not state.failed_hosts
    assert "spark-2 applies its side in another operation" in caplog.text
    assert [len([c for c in executed(state)[h] if APPLY.search(c)]) for h in plans] == [1, 1]


def test_a_link_missing_at_the_worker_is_applied_not_refused_for_the_heads_silent_pings():
    """The head's file in place, the worker's gone (reverted, reinstalled): the head's pings fail, and that is the
    link step's to fix, not a reason for the preflight to refuse the pair for good."""
    plans = _plans()
    worker = plans["spark-2"].paths

    def responses(plan):
        if plan.settings.pair_role == "head":
            out = _responses(drop=(r"^ping\t",))(plan)
            out[SPECFLEET_FACT] += [f"ping\t{i}\t{a}\tfail" for i, a in (("enp1s0f1np1", "192.168.100.11"),
                                                                         ("enP2p1s0f1np1", "192.168.101.11"))]
            return out
        return _responses(drop=(re.escape(NETPLAN_FILE), re.escape(worker.netplan_staged), r"^addr\tenp|^addr\tenP"))(plan)

    def converge_link():
        preflight()
        pair_link()
    state = run_deploy(plans, converge_link, responses=responses)
    assert _refusals(state) == {"spark-1": "", "spark-2": ""}
    assert len([c for c in executed(state)["spark-2"] if APPLY.search(c)]) == 1
