"""The fleet file is split once: one parsed fleet (specfleet/fleet/model.py) holds each host's connection and deploy
vars and the roles its groups give, and the per-host settings and the rules between hosts read that model, never the
raw inventory."""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

from specfleet.fleet import tunables
from specfleet.fleet.inventory import load_inventory
from specfleet.fleet.model import read_fleet
from specfleet.plan import build_plans, load_inventory_or_fail

ROOT = Path(__file__).resolve().parents[2]

# a gateway, a Hub mirror, two single Sparks behind the gateway and a pair: every fleet-level feature at once
FLEET = """\
all:
  vars: {operator_users: [nvidia]}
  hosts:
    spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3, serve_host: 127.0.0.1}
    spark-b: {ansible_host: 10.0.0.3, ansible_user: admin, serves: eagle3, serve_host: 127.0.0.1}
  children:
    gateway:
      hosts:
        gw-1: {ssh_hostname: 10.0.0.1, _sudo: true}
    hub_mirror:
      hosts:
        mirror-1: {ssh_hostname: 10.0.0.9}
    pair_a:
      vars: {serves: qwen3_eagle3_pair, serve_host: 127.0.0.1, image: 'nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12'}
      hosts:
        spark-1: {ssh_hostname: 10.0.0.11, pair_role: head}
        spark-2: {ssh_hostname: 10.0.0.12, pair_role: worker}
"""
HOSTS = ["spark-a", "spark-b", "gw-1", "mirror-1", "spark-1", "spark-2"]


def test_the_fleet_file_is_split_once_per_host_on_the_way_to_the_plans(fleet_file, monkeypatch):
    fleet_file(FLEET)
    inventory = load_inventory_or_fail()
    address = {h: v.get("ssh_hostname", v.get("ansible_host")) for h, v in inventory.host_vars.items()}
    split = tunables.split_vars
    runs: Counter = Counter()

    def counted(host_vars):
        runs[next(h for h, a in address.items() if a == host_vars.get("ssh_hostname", host_vars.get("ansible_host")))] += 1
        return split(host_vars)

    # every module that holds the function, under any name: a second split anywhere is counted
    for module in [m for name, m in sys.modules.items() if name.startswith("specfleet") and m is not None]:
        for attr, value in list(vars(module).items()):
            if value is split:
                monkeypatch.setattr(module, attr, counted)
    plans = build_plans(inventory, "eagle3", overrides={"keep_releases": 4})
    assert list(plans) == HOSTS
    assert runs == dict.fromkeys(HOSTS, 1), runs


def test_the_model_holds_each_hosts_split_vars_and_the_roles_of_its_groups(tmp_path):
    path = tmp_path / "fleet.yml"
    path.write_text(FLEET)
    fleet = read_fleet(load_inventory(path), {"keep_releases": 4})
    assert list(fleet.hosts) == HOSTS and fleet.path == path
    assert (fleet.gateways, fleet.mirrors, fleet.mirror) == (("gw-1",), ("mirror-1",), "mirror-1")
    assert fleet.sparks == ("spark-a", "spark-b", "spark-1", "spark-2")
    assert fleet.pairs == {"pair_a": ("spark-1", "spark-2")}
    b = fleet.hosts["spark-b"]
    assert b.connection == {"ssh_hostname": "10.0.0.3", "ssh_user": "admin"}  # Ansible's names, renamed for pyinfra
    assert b.deploy == {"operator_users": ["nvidia"], "serves": "eagle3", "serve_host": "127.0.0.1", "keep_releases": 4}
    assert fleet.hosts["gw-1"].connection == {"ssh_hostname": "10.0.0.1", "_sudo": True}
    # set above `all` (a group, the host itself, or --data): a fleet-derived default leaves them alone
    assert fleet.hosts["spark-1"].explicit == {"serves", "serve_host", "image", "ssh_hostname", "pair_role",
                                               "keep_releases"}
    assert "operator_users" not in b.explicit


RULE_MODULES = ("fleet/settings", "mirror/rules", "gateway/rules", "pair/rules")


def test_the_settings_and_the_rules_between_hosts_read_the_model_not_the_inventory():
    for name in RULE_MODULES:
        tree = ast.parse((ROOT / "specfleet" / f"{name}.py").read_text(encoding="utf-8"))
        imported = {(node.module or "").lstrip(".") for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not [m for m in imported if m.rpartition(".")[2] == "inventory"], (name, imported)
        assert "split_vars" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}, name
