"""A pair's files (the pure part): the link's netplan, the worker's authorized_keys line for
the head's MPI key and its sudoers rule for the gate, and the head's known_hosts for the worker, read back by real
parsers (YAML, ssh-keygen, visudo)."""

import subprocess

import pytest
import yaml

from specfleet.host.layout import PAIR_USER, Layout
from specfleet.pair.render import (
    NETPLAN_HEADER,
    PairFileError,
    authorized_key,
    gate_command,
    known_hosts,
    netplan,
    sudoers,
)
from tests.unit.fakehost import make_plans

IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"
GATE = "/var/lib/specfleet/bin/specfleet-pair-gate"


def _pair_settings():
    host = {"pair_role": "head", "image": IMAGE}
    plans = make_plans({"spark-1": {**host, "ssh_hostname": "10.0.0.11"},
                        "spark-2": {**host, "pair_role": "worker", "ssh_hostname": "10.0.0.12",
                                    "pair_link_addresses": ["192.168.100.21/24", "192.168.101.21/24"]}},
                       "qwen3_eagle3_pair", groups={"pair_a": ["spark-1", "spark-2"]})
    return plans["spark-1"].settings, plans["spark-2"].settings


def test_the_netplan_gives_each_link_interface_its_own_subnets_address():
    head, worker = _pair_settings()
    text = netplan(head)
    assert text.startswith(NETPLAN_HEADER)
    assert yaml.safe_load(text) == {"network": {"version": 2, "ethernets": {
        "enp1s0f1np1": {"dhcp4": False, "dhcp6": False, "addresses": ["192.168.100.10/24"]},
        "enP2p1s0f1np1": {"dhcp4": False, "dhcp6": False, "addresses": ["192.168.101.10/24"]}}}}
    assert yaml.safe_load(netplan(worker))["network"]["ethernets"]["enP2p1s0f1np1"]["addresses"] == ["192.168.101.21/24"]


def test_the_mpi_key_logs_in_only_from_the_heads_link_and_only_runs_the_gate(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "root@spark-1", "-f", str(tmp_path / "k")],
                   check=True)
    public = (tmp_path / "k.pub").read_text()
    head, _ = _pair_settings()
    line = authorized_key(public, head.pair_link_addresses, GATE, "pair_a")
    assert line == (f'restrict,from="192.168.100.10,192.168.101.10",command="{GATE}" '
                    f'{" ".join(public.split()[:2])} specfleet-pair_a\n')
    (tmp_path / "authorized_keys").write_text(line)
    # OpenSSH's own parser reads the line as one key with its options (ssh-keygen -l takes authorized_keys files)
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "authorized_keys")], capture_output=True, text=True)
    assert out.returncode == 0 and "specfleet-pair_a (ED25519)" in out.stdout, out


@pytest.mark.parametrize("key, command", [
    ('command="sh" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm2JCOBcUqqS7bFWq8FQw3wB3eq2KlWc0QyZgk7nVJ5', GATE),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm2JCOBcUqqS7bFWq8FQw3wB3eq2KlWc0QyZgk7nVJ5\nssh-ed25519 "
     "AAAAC3NzaC1lZDI1NTE5AAAAIBm2JCOBcUqqS7bFWq8FQw3wB3eq2KlWc0QyZgk7nVJ5", GATE),
    ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7", GATE),
    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBm2JCOBcUqqS7bFWq8FQw3wB3eq2KlWc0QyZgk7nVJ5", '/bin/sh -c "id"'),
])
def test_a_key_or_command_that_could_widen_the_entry_is_refused(key, command):
    with pytest.raises(PairFileError):
        authorized_key(key, ["192.168.100.10/24"], command, "pair_a")


def test_the_sudoers_rule_lets_the_pair_login_run_the_gate_with_its_arguments_only(tmp_path):
    lay = Layout("/var/lib/specfleet", "/etc/specfleet", "specfleet-trtllm")
    text = sudoers(lay)
    assert text.splitlines()[1:] == [
        "Cmnd_Alias SPECFLEET_PAIR_GATE = /var/lib/specfleet/bin/pair-gate --container specfleet-trtllm "
        "--agent /opt/specfleet-pair/pair-agent, /var/lib/specfleet/bin/pair-gate --switch",
        'Defaults!SPECFLEET_PAIR_GATE env_keep += "SSH_ORIGINAL_COMMAND"',
        f"{PAIR_USER} ALL=(root) NOPASSWD: SPECFLEET_PAIR_GATE"]
    assert gate_command(lay) == "sudo -n " + " ".join(lay.pair_gate_argv())
    assert gate_command(lay, switch=True) == "sudo -n /var/lib/specfleet/bin/pair-gate --switch"
    (tmp_path / "specfleet-pair").write_text(text)
    (tmp_path / "specfleet-pair").chmod(0o440)
    # sudo's own parser (visudo -c) accepts it; a rule with a stray word does not
    ok = subprocess.run(["visudo", "-c", "-f", str(tmp_path / "specfleet-pair")], capture_output=True, text=True)
    assert ok.returncode == 0 and "parsed OK" in ok.stdout, ok
    (tmp_path / "broken").write_text(text.replace("NOPASSWD:", "NOPASSWD"))
    bad = subprocess.run(["visudo", "-c", "-f", str(tmp_path / "broken")], capture_output=True, text=True)
    assert bad.returncode != 0
    with pytest.raises(PairFileError, match="cannot go into a sudoers rule"):
        sudoers(Layout("/var/lib/spec fleet", "/etc/specfleet", "specfleet-trtllm"))


def test_the_workers_host_key_is_pinned_at_its_link_addresses(tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "host")], check=True)
    _, worker = _pair_settings()
    line = known_hosts((tmp_path / "host.pub").read_text(), worker.pair_link_addresses)
    (tmp_path / "known_hosts").write_text(line)
    for address in ("192.168.100.21", "192.168.101.21"):  # OpenSSH finds the key under each name the launch uses
        found = subprocess.run(["ssh-keygen", "-F", address, "-f", str(tmp_path / "known_hosts")], capture_output=True,
                               text=True)
        assert found.returncode == 0 and "ssh-ed25519" in found.stdout
    assert subprocess.run(["ssh-keygen", "-F", "192.168.100.11", "-f", str(tmp_path / "known_hosts")]).returncode == 1
    with pytest.raises(PairFileError, match="host key"):
        known_hosts("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7", worker.pair_link_addresses)
