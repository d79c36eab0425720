"""The CI inventory differs from a production one in at most 7 data keys, each justified in docs/dev/ci.md."""

import re
from pathlib import Path

import yaml

from specfleet.fleet.tunables import load_defaults
from specfleet_lab import Fleet, write_inventory
from specfleet_lab.qemu.driver import QemuDriver
from specfleet_lab.qemu.guest import QemuHost
from tests.vm import lab

CI_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "dev" / "ci.md").read_text()


def _ci_paragraph() -> str:
    section = CI_PAGE[CI_PAGE.index("# CI and the lab"):]
    start = section.index("the CI inventory differs from a production one only in these")
    return section[start:section.index("\n\n", section.index("\n- ", start) + 1)]


def test_at_most_seven_ci_only_keys_and_all_are_real_vars():
    keys = set(lab.ci_vars(8080, "10.0.2.2"))
    assert len(keys) <= 7, sorted(keys)
    assert keys <= set(load_defaults()), keys - set(load_defaults())
    assert "gpus" not in keys, "the guests carry the stand-in NVIDIA container toolkit: gpus keeps its default"


def test_each_ci_only_key_has_its_line_on_the_ci_page():
    para = _ci_paragraph()
    listed = re.findall(r"^- `([a-z_0-9]+)`: \S", para, flags=re.M)
    assert sorted(listed) == sorted(lab.ci_vars(8080, "10.0.2.2")), (listed, sorted(lab.ci_vars(8080, "10.0.2.2")))


def test_ci_inventory_is_the_fleet_inventory_plus_ci_vars(tmp_path, monkeypatch):
    guests = [QemuHost(name=f"spark-{i}", ssh_port=2200 + i, overlay=tmp_path / f"{i}.qcow2",
                       pidfile=tmp_path / f"{i}.pid", console_log=tmp_path / f"{i}.log",
                       key_path=tmp_path / "id_ed25519") for i in (1, 2)]
    fleet_inv = tmp_path / "inventory.yml"
    write_inventory(fleet_inv, guests, tmp_path / "id_ed25519")
    fleet = Fleet(guests=guests, workdir=tmp_path, inventory_path=fleet_inv, key_path=tmp_path / "id_ed25519",
                  driver=QemuDriver())
    monkeypatch.setattr(lab, "write_lock", lambda inventory: inventory)  # `specfleet lock` needs the Hub stand-in
    out = lab.write_ci_inventory(fleet, 8080, tmp_path / "ci.yml")
    data = yaml.safe_load(out.read_text())["all"]["vars"]
    connection = {"ssh_user", "_sudo", "ssh_key", "ssh_known_hosts_file", "ssh_strict_host_key_checking"}
    assert set(data) == connection | set(lab.ci_vars(8080, "10.0.2.2")) | {"operator_users"}
    assert data["ssh_user"] == "spark" and data["_sudo"] is True
