"""pair-link, the pair host's link change, run as a program against stand-ins of the host's network tools
(tests/unit/fake_net: ip, ss, netplan try, systemd-run). Each test ends with what the host's network is afterwards:
the link's addresses, the management interface's, and NETPLAN_FILE."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.host.layout import Layout
from tests.unit.installed import installed

TOOL = installed() / "pair_link.py"
FAKES = Path(__file__).parent / "fake_net"
LINK = ["enp1s0f1np1", "enP2p1s0f1np1"]
ADDRS = ["192.168.100.10/24", "192.168.101.10/24"]
BEFORE = {"eth0": ["10.0.2.15/24"], "lo": ["127.0.0.1/8"]}  # the host's addresses before any link change
NETPLAN = """network:
  version: 2
  ethernets:
    enp1s0f1np1: {dhcp4: false, dhcp6: false, addresses: [192.168.100.10/24]}
    enP2p1s0f1np1: {dhcp4: false, dhcp6: false, addresses: [192.168.101.10/24]}
"""
# the controller's session over the management interface, and a non-SSH connection over the link (ignored)
SS = ('0 0 10.0.2.15:22 10.0.2.2:40022 users:(("sshd",pid=900,fd=4),("sshd",pid=902,fd=4))\n'
      '0 0 192.168.100.10:5000 192.168.100.11:41000 users:(("python3",pid=77,fd=3))\n')


@pytest.fixture
def host(tmp_path):
    etc = tmp_path / "etc-netplan"
    etc.mkdir()
    net = tmp_path / "net.json"
    net.write_text(json.dumps({"addrs": BEFORE,
                               "routes": {"10.0.2.2": "eth0", "192.168.100.11": "enp1s0f1np1"}, "ss": SS}))
    lay = Layout(str(tmp_path / "data"))
    Path(lay.pair_dir).mkdir(parents=True)
    Path(lay.netplan_staged).write_text(NETPLAN)
    env = {"PATH": f"{FAKES}:{Path(sys.executable).parent}:/usr/bin:/bin", "FAKE_NET": str(net),
           "FAKE_ETC_NETPLAN": str(etc), "FAKE_READY": str(tmp_path / "netplan-try.ready")}

    def run(*args: str, **fake) -> subprocess.CompletedProcess:
        extra = ["--netplan-file", str(etc / "60-specfleet-pair.yaml"), "--ready-stamp", env["FAKE_READY"]]
        argv = [sys.executable, str(TOOL), "--data-dir", lay.data_dir, *args]
        if args[0] == "apply":
            argv += extra
        return subprocess.run(argv, env={**env, **fake}, capture_output=True, text=True, timeout=120)

    def addrs() -> dict:
        return json.loads(net.read_text())["addrs"]

    return run, addrs, etc / "60-specfleet-pair.yaml", lay, net


def _apply(run, confirm_sec: int = 30, **fake):
    return run("apply", "--interfaces", ",".join(LINK), "--addresses", ",".join(ADDRS),
               "--confirm-sec", str(confirm_sec), "--verify-sec", "3", **fake)


def _netplan_calls(net: Path) -> int:
    log = Path(f"{net}.log")
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_management_is_what_the_ssh_sessions_use(host):
    run, _, _, _, net = host
    data = json.loads(net.read_text())
    data["addrs"]["ens4"] = ["10.88.0.11/16"]
    data["routes"]["10.88.0.1"] = "ens4"
    data["ss"] += '0 0 [::ffff:10.88.0.11]:22 [::ffff:10.88.0.1]:50000 users:(("sshd-session",pid=5,fd=4))\n'
    net.write_text(json.dumps(data))
    out = run("management")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"management": ["ens4", "eth0"]}  # not the link: its socket is not sshd's


def test_a_link_on_the_management_interface_is_refused_before_anything_changes(host):
    run, addrs, target, lay, net = host
    out = run("apply", "--interfaces", "eth0,enP2p1s0f1np1", "--addresses", ",".join(ADDRS), "--confirm-sec", "30")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [f"{target}: the link would change eth0, which carries this host's SSH "
                                       "connection (a management interface); nothing was changed (the link takes "
                                       "the ConnectX-7 interfaces only)"]
    assert not target.exists() and _netplan_calls(net) == 0
    assert addrs() == BEFORE


def test_apply_then_confirm_keeps_the_link_and_a_second_apply_changes_nothing(host):
    run, addrs, target, lay, net = host
    out = _apply(run)
    assert out.returncode == 0, out.stderr
    assert "applied" in out.stdout and "reverts it in 30 s unless confirmed" in out.stdout
    assert run("confirm").stdout.strip() == "link change accepted"
    assert target.read_text() == NETPLAN and oct(target.stat().st_mode & 0o777) == "0o600"
    assert addrs()["enp1s0f1np1"] == ["192.168.100.10/24"] and addrs()["eth0"] == ["10.0.2.15/24"]
    assert not Path(lay.netplan_previous).exists()
    again = _apply(run)
    assert again.returncode == 0 and "unchanged" in again.stdout and _netplan_calls(net) == 1
    assert run("confirm").stdout.strip() == "no link change awaits confirmation (last: accepted)"


def test_a_change_nobody_confirms_is_reverted_and_the_file_put_back(host):
    run, addrs, target, lay, net = host
    target.write_text("# the operator's earlier link file\n")
    out = _apply(run, confirm_sec=2)  # the controller never comes back
    assert out.returncode == 0, out.stderr
    state = {}
    for _ in range(100):
        state = json.loads(Path(lay.link_state).read_text())
        if state["state"] != "trying":
            break
        time.sleep(0.1)
    assert state["state"] == "reverted" and state["why"] == "not confirmed within 2 s"
    assert target.read_text() == "# the operator's earlier link file\n"
    assert addrs() == BEFORE
    late = run("confirm")
    assert late.returncode == 1 and late.stdout.strip() == "no link change awaits confirmation (last: reverted)"


def _failed_apply(run, fake: str, message: str) -> None:
    out = _apply(run, FAKE_NETPLAN=fake)
    assert out.returncode == 1
    assert out.stderr.strip() == message


def test_addresses_that_do_not_come_up_are_rejected_at_once(host):
    run, addrs, target, lay, _ = host
    _failed_apply(run, "noaddr", ("pair-link: enp1s0f1np1, enP2p1s0f1np1 did not get 192.168.100.10/24, "
                                  "192.168.101.10/24 within 3.0 s: the change was rejected (reverted: rejected: "
                                  "the link's addresses did not come up)"))
    assert not target.exists() and addrs() == BEFORE


def test_netplan_refusing_the_file_leaves_the_network_and_files_as_they_were(host):
    run, addrs, target, lay, _ = host
    _failed_apply(run, "invalid", ("pair-link: netplan try did not apply the link: netplan try failed: "
                                   "/etc/netplan/60-specfleet-pair.yaml:2:1: Invalid YAML: did not find expected node "
                                   "content:"))
    assert not target.exists() and addrs() == BEFORE
    assert json.loads(Path(lay.link_state).read_text())["state"] == "failed"
    assert oct(Path(lay.link_log).stat().st_mode & 0o777) == "0o600"


def test_an_error_netplan_reverts_by_itself_is_a_failure_not_a_missing_confirmation(host):
    run, addrs, target, lay, _ = host
    target.write_text("# the operator's earlier link file\n")
    _failed_apply(run, "error", ("pair-link: netplan try did not apply the link: netplan try failed: An error "
                                 "occurred: Command '['udevadm', 'settle']' returned non-zero exit status 1."))
    assert target.read_text() == "# the operator's earlier link file\n"
    assert addrs() == BEFORE


@pytest.mark.parametrize("fake, why", [
    ("lost", "specfleet-pair-link ended without trying the change"),
    ("fail", "systemd-run failed: Failed to start transient service unit: Unit specfleet-pair-link.service already "
             "exists."),
])
def test_a_try_that_never_runs_puts_the_file_back(host, fake, why):
    run, addrs, target, lay, net = host
    target.write_text("# the operator's earlier link file\n")
    out = run("apply", "--interfaces", ",".join(LINK), "--addresses", ",".join(ADDRS), "--confirm-sec", "30",
              "--start-sec", "1", FAKE_SYSTEMD_RUN=fake)
    assert out.returncode == 1
    assert out.stderr.strip() == f"pair-link: netplan try did not apply the link: {why}"
    assert target.read_text() == "# the operator's earlier link file\n"  # not the untried link, for the next boot
    assert json.loads(Path(lay.link_state).read_text())["state"] == "failed"
    assert addrs() == BEFORE and _netplan_calls(net) == 0


def test_a_try_still_starting_when_apply_stops_waiting_is_abandoned_and_reverted(host):
    run, addrs, target, lay, net = host
    target.write_text("# the operator's earlier link file\n")
    out = run("apply", "--interfaces", ",".join(LINK), "--addresses", ",".join(ADDRS), "--confirm-sec", "30",
              "--start-sec", "1", FAKE_NETPLAN="slow")
    assert out.returncode == 1
    assert out.stderr.strip() == ("pair-link: netplan try did not apply the link: abandoned: netplan try had not "
                                  "applied when apply stopped waiting")
    assert json.loads(Path(lay.link_state).read_text())["state"] == "reverted"
    assert target.read_text() == "# the operator's earlier link file\n"
    assert addrs() == BEFORE and _netplan_calls(net) == 1  # it ran, applied late, and was reverted
