"""The lab's stand-in CX-7 link (lab/specfleet_lab/pair_link.py), without VMs: the two more NICs each end's QEMU
command line carries, the .link files that name them like a Spark's interfaces, and the state surviving a reload.
Booting it for real is the pair's VM tests' (not built yet)."""

from __future__ import annotations

import configparser
import json
import shutil
from pathlib import Path

from specfleet_lab.qemu.guest import QemuHost, qemu_argv
from specfleet_lab.qemu.pair_link import GROUP, IFNAMES, PairLink, new_pair_link


def _guest(tmp_path: Path, link: PairLink | None, side: int) -> QemuHost:
    return QemuHost(name=f"spark-{side + 1}", ssh_port=2222, overlay=tmp_path / "g.qcow2", pidfile=tmp_path / "g.pid",
                 console_log=tmp_path / "g.log", key_path=tmp_path / "id", argv=[], pair_link=link, pair_side=side)


def test_each_end_gets_one_nic_per_logical_interface_on_the_links_own_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    link = PairLink((40201, 40202))
    ends = [qemu_argv(_guest(tmp_path, link, side), Path("/k"), Path("/i"), 2048, 1, "tcg", "s") for side in (0, 1)]
    for argv in ends:
        assert f"socket,id=cx0,mcast={GROUP}:40201,localaddr=127.0.0.1" in argv
        assert f"socket,id=cx1,mcast={GROUP}:40202,localaddr=127.0.0.1" in argv
    macs = [a.split("mac=")[1] for argv in ends for a in argv if "netdev=cx" in a]
    assert len(set(macs)) == 4, macs  # unique within a guest and across the link
    plain = qemu_argv(_guest(tmp_path, None, 0), Path("/k"), Path("/i"), 2048, 1, "tcg", "s")
    assert not [a for a in plain if "cx" in a]


def test_the_link_files_name_each_nic_like_a_sparks_interface_by_its_mac():
    link = new_pair_link()
    for side in (0, 1):
        files = link.link_files(side)
        assert len(files) == len(IFNAMES)
        for i, (path, text) in enumerate(sorted(files.items(), key=lambda kv: IFNAMES.index(kv[0].split("-")[-1][:-5]))):
            parsed = configparser.ConfigParser()
            parsed.optionxform = str
            parsed.read_string(text)
            assert parsed["Match"]["MACAddress"] == link.mac(side, i)
            assert parsed["Link"]["Name"] == IFNAMES[i] and path.endswith(f"-{IFNAMES[i]}.link")
        assert all(len(n) <= 15 for n in IFNAMES)  # IFNAMSIZ


def test_the_link_is_kept_in_the_fleet_state(tmp_path):
    g = _guest(tmp_path, PairLink((40203, 40204)), 1)
    again = QemuHost.from_json(json.loads(json.dumps(g.to_json())))
    assert (again.pair_link, again.pair_side) == (PairLink((40203, 40204)), 1)
    old = {k: v for k, v in g.to_json().items() if k not in ("pair_link", "pair_side")}  # a fleet.json from before
    assert QemuHost.from_json(old).pair_link is None


def test_the_labs_interface_names_are_the_products_defaults():  # seen failing with a renamed IFNAMES entry
    from specfleet import defaults
    assert list(IFNAMES) == defaults.pair_link_interfaces


def test_the_container_links_names_subnets_and_addresses_are_the_products_defaults():
    """The container driver gives a pair's link the addresses the deploy's netplan writes (docker assigns them, then
    networkd keeps them): the defaults' interface names, subnets, and the head's .10 and the worker's .11."""
    from specfleet.fleet.tunables import load_defaults
    from specfleet_lab.container import driver
    defaults = load_defaults()
    assert list(driver.LINK_IFNAMES) == defaults["pair_link_interfaces"] == list(IFNAMES)
    assert list(driver.LINK_SUBNETS) == defaults["pair_link_subnets"]
    assert defaults["pair_link_addresses"] is None  # the default: host 10 (head) and 11 (worker) of each subnet
    assert driver.LINK_HOSTS == (10, 11)
