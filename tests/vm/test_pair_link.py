"""The stand-in CX-7 link between two QEMU guests (kernel: the link's own NICs, named by udev),
booted for real: each end's NICs carry a Spark's interface names (from the .link files the lab writes), traffic
crosses both logical interfaces once each end has its address, and the pair preflight's reading of a host (the one
status read, `pair_fleet.host_problems`) sees the link up with no speed (virtio) and refuses a link subnet that
overlaps the guest's own NAT network. Two guests of their own, the session fleet paused meanwhile: --full."""

from __future__ import annotations

import pytest

from specfleet import defaults
from specfleet.fleet.status import SpecfleetHost
from specfleet.pair.rules import host_problems
from tests.unit.fakehost import status_command
from tests.vm.conftest import own_guests

pytestmark = [pytest.mark.vm, pytest.mark.full, pytest.mark.kernel("netplan-link")]

SUBNETS = tuple(defaults.pair_link_subnets)  # NVIDIA's connect-two-sparks: one /24 per interface
IFNAMES = tuple(defaults.pair_link_interfaces)  # a Spark's names, which the lab gives the link's NICs


@pytest.fixture(scope="module")
def pair(tmp_path_factory, request):
    return own_guests(tmp_path_factory, request, "pair-link",
                      "pair link: boot 2 guests with the stand-in CX-7 link, NICs named", pair_link=True).guests


def _status(g, links=IFNAMES):
    out = g.ssh(status_command("/var/lib/specfleet", "specfleet-trtllm", LINKS="\n".join(links))).stdout
    return SpecfleetHost().process(out.splitlines()).pair


def test_the_link_has_a_sparks_names_and_carries_traffic_on_both_interfaces(pair):
    for g in pair:
        names = g.ssh("ls /sys/class/net").stdout.split()
        assert set(IFNAMES) <= set(names), (g.name, names)
    for side, g in enumerate(pair):
        g.ssh(" && ".join(f"ip addr replace 192.168.{100 + i}.{10 + side}/24 dev {n} && ip link set {n} up"
                          for i, n in enumerate(IFNAMES)))
    head, worker = pair
    worker.ssh("for p in 0 1; do nohup python3 -m http.server --bind 192.168.10$p.11 808$p >/dev/null 2>&1 & done; "
               "sleep 2")
    for i, n in enumerate(IFNAMES):
        url = f"http://192.168.{100 + i}.11:808{i}/"
        got = head.ssh(f"python3 -c \"import urllib.request as u; print(u.urlopen('{url}', timeout=20).status)\"",
                       check=False)
        assert got.stdout.strip() == "200", (url, got.stderr[-500:])
        route = head.ssh(f"ip route get 192.168.{100 + i}.11").stdout
        assert f"dev {n} " in route, route  # it took the link, not the NAT


def test_the_preflight_reads_the_link_and_refuses_a_subnet_on_another_network(pair):
    """After the test above gave each end its link addresses (the module's tests run in order)."""
    st = _status(pair[0])
    assert st.links == {n: ("up", None) for n in IFNAMES}, st.links  # virtio reports no speed
    v = {"pair_link_interfaces": list(IFNAMES), "pair_link_subnets": list(SUBNETS), "pair_link_min_speed_mbps": 200000}
    assert host_problems(v, st.interfaces, st.addresses, st.links) == []
    nat = next(cidr for ifname, cidr in st.addresses if ifname == "eth0")  # QEMU user-mode NAT: 10.0.2.15/24
    clash = host_problems({**v, "pair_link_subnets": ["10.0.2.0/24", SUBNETS[1]]}, st.interfaces, st.addresses,
                          st.links)
    assert clash == [f"pair_link_subnets: 10.0.2.0/24 overlaps {nat} on eth0, which is not a link interface "
                     "(allowed: link subnets no other network of the host uses)"], clash
    wrong = ["enp1s0f0np0", IFNAMES[1]]  # the port's other interface, not cabled here (no such NIC in the guest)
    st = _status(pair[0], links=wrong)
    gone = host_problems({**v, "pair_link_interfaces": wrong}, st.interfaces, st.addresses, st.links)
    # the NIC that does carry 192.168.100.0/24 is now "another interface": both are said
    assert len(gone) == 2 and gone[0].startswith("pair_link_interfaces: enp1s0f0np0 does not exist on this host"), gone
    assert gone[1].startswith(f"pair_link_subnets: {SUBNETS[0]} overlaps 192.168.100.10/24 on {IFNAMES[0]},"), gone
