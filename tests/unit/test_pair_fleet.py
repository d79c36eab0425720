"""Two Sparks as one server, declared in the fleet file: a pair_<name> group of a head and a
worker with their ConnectX-7 link, the playbook's two-Spark profile, and `specfleet check` refusing a malformed pair
with one `HOST: KEY: ...` line per problem; a deploy renders both hosts of a well-formed pair."""

import pytest
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.engines.command import serve_args
from specfleet.fleet.inventory import load_inventory
from specfleet.fleet.model import read_fleet
from specfleet.fleet.profiles import nodes, profiles
from specfleet.fleet.settings import build_fleet
from specfleet.pins.lockfile import fleets_to_lock
from tests.unit.fakehost import make_plans

PAIR_DEPLOY = "deploys/qwen3_eagle3_pair.py"
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"
HEAD = "{ssh_hostname: 10.0.0.11, pair_role: head}"
WORKER = "{ssh_hostname: 10.0.0.12, pair_role: worker}"


def _fleet(head: str = HEAD, worker: str = WORKER, image: str = IMAGE, more: str = "", pair_more: str = "") -> str:
    return (f"all:\n  vars: {{image: '{image}'}}\n  hosts: {{{more}}}\n  children:\n"
            f"    pair_a:\n      hosts:\n        spark-1: {head}\n        spark-2: {worker}\n{pair_more}")


def _check(deploy: str = PAIR_DEPLOY):
    return CliRunner().invoke(main, ["check", "inventory.py", deploy])


def test_a_well_formed_pair_passes_and_gets_nvidias_addresses(fleet_file):
    path = fleet_file(_fleet())
    result = _check()
    assert result.exit_code == 0 and result.output.startswith("2 host(s) valid for "), result.output
    fleet, problems = build_fleet(read_fleet(load_inventory(path)), "qwen3_eagle3_pair")
    assert problems == []
    head, worker = fleet["spark-1"], fleet["spark-2"]
    assert (head.pair, head.pair_role, head.pair_peer) == ("pair_a", "head", "spark-2")
    assert (worker.pair, worker.pair_role, worker.pair_peer) == ("pair_a", "worker", "spark-1")
    # NVIDIA's connect-two-sparks: one subnet per logical interface, .10 and .11
    assert head.pair_link_addresses == ["192.168.100.10/24", "192.168.101.10/24"]
    assert worker.pair_link_addresses == ["192.168.100.11/24", "192.168.101.11/24"]
    assert head.pair_peer_link_addresses == worker.pair_link_addresses
    assert head.pair_link_interfaces == ["enp1s0f1np1", "enP2p1s0f1np1"]


def test_the_profile_is_the_playbooks_in_the_names_1_3_0rc12_accepts(fleet_file):
    path = fleet_file(_fleet())
    s = build_fleet(read_fleet(load_inventory(path)), "qwen3_eagle3_pair")[0]["spark-1"]
    profile = profiles()["qwen3_eagle3_pair"]
    assert profile["target"]["repo"] == "nvidia/Qwen3-235B-A22B-FP4"
    assert profile["draft"]["repo"] == "nvidia/Qwen3-235B-A22B-Eagle3"
    spec = s.llm_api_options["speculative_config"]
    assert spec["max_draft_len"] == 3 and spec["decoding_type"] == "Eagle3"  # 1.3's own name for Eagle
    assert "speculative_model" in spec and "speculative_model_dir" not in spec  # 1.3's draft key
    assert s.llm_api_options["enable_chunked_prefill"] is False
    args = serve_args(s)
    assert args[args.index("--tp_size") + 1] == "2" and args[args.index("--max_num_tokens") + 1] == "1024"
    assert "--config" in args  # 1.3.0rc12's flag for the YAML


BAD = [
    # (what, fleet text, the line the check must print (its start))
    ("one host", f"all:\n  vars: {{image: '{IMAGE}'}}\n  children:\n    pair_a:\n      hosts:\n        spark-1: {HEAD}\n",
     "spark-1: pair_a: has 1 host(s): spark-1 (allowed: exactly 2, a head and a worker)"),
    ("three hosts", _fleet(pair_more="        spark-3: {ssh_hostname: 10.0.0.13, pair_role: worker}\n"),
     "spark-1: pair_a: has 3 host(s): spark-1, spark-2, spark-3 (allowed: exactly 2"),
    ("a role missing", _fleet(worker="{ssh_hostname: 10.0.0.12}"),
     "spark-2: pair_role: not set (allowed: head or worker, one of each in pair_a)"),
    ("a role doubled", _fleet(worker="{ssh_hostname: 10.0.0.12, pair_role: head}"),
     "spark-2: pair_role: head is also spark-1's role in pair_a (allowed: one head and one worker)"),
    ("a role that is none", _fleet(worker="{ssh_hostname: 10.0.0.12, pair_role: leader}"), "spark-2: pair_role: "),
    ("overlapping link subnets", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, pair_link_subnets: "
                                             "[192.168.100.0/24, 192.168.100.128/25]}"),
     "spark-1: pair_link_subnets: 192.168.100.0/24 overlaps 192.168.100.128/25 (allowed: one subnet per link"),
    ("the two ends on other subnets", _fleet(worker="{ssh_hostname: 10.0.0.12, pair_role: worker, pair_link_subnets: "
                                                    "[192.168.102.0/24, 192.168.103.0/24]}"),
     "spark-2: pair_link_subnets: ['192.168.102.0/24', '192.168.103.0/24'] differs from spark-1's"),
    ("an interface name with a shell separator", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, "
                                                             "pair_link_interfaces: ['enp1s0f1np1;reboot']}"),
     "spark-1: pair_link_interfaces: 'enp1s0f1np1;reboot' is not an interface name"),
    ("an interface name over 15 characters", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, "
                                                         "pair_link_interfaces: [enP2p1s0f1np1xyz]}"),
     "spark-1: pair_link_interfaces: 'enP2p1s0f1np1xyz' is not an interface name"),
    ("an interface named twice", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, "
                                             "pair_link_interfaces: [enp1s0f1np1, enp1s0f1np1]}"),
     "spark-1: pair_link_interfaces: names an interface twice"),
    ("fewer subnets than interfaces", _fleet(pair_more="      vars: {pair_link_subnets: [192.168.100.0/24]}\n"),
     "pair_a (spark-1, spark-2): pair_link_subnets: has 1 subnet(s) for 2 link interface(s)"),
    ("an address outside its subnet", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, pair_link_addresses: "
                                                  "[10.9.9.9/24, 192.168.101.10/24]}"),
     "spark-1: pair_link_addresses: 10.9.9.9/24 is not in 192.168.100.0/24, the subnet of enp1s0f1np1"),
    ("an address without its prefix", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, pair_link_addresses: "
                                                  "[192.168.100.10, 192.168.101.10/24]}"),
     "spark-1: pair_link_addresses: '192.168.100.10' is not an IPv4 address with its prefix"),
    ("a network address as an address", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, pair_link_addresses: "
                                                    "[192.168.100.0/24, 192.168.101.10/24]}"),
     "spark-1: pair_link_addresses: '192.168.100.0/24' is the network or broadcast address"),
    ("the same addresses on both ends", _fleet(pair_more="      vars: {pair_link_addresses: "
                                                         "[192.168.100.10/24, 192.168.101.10/24]}\n"),
     "spark-2: pair_link_addresses: ['192.168.100.10/24', '192.168.101.10/24'] are also spark-1's"),
    ("one address for two interfaces", _fleet(head="{ssh_hostname: 10.0.0.11, pair_role: head, "
                                                   "pair_link_addresses: [192.168.100.10/24]}"),
     "spark-1: pair_link_addresses: has 1 address(es) for 2 link interface(s)"),
    ("a subnet too small for the default addresses", _fleet(pair_more="      vars: {pair_link_subnets: "
                                                                      "[192.168.100.0/29, 192.168.101.0/29]}\n"),
     "spark-1: pair_link_addresses: not set, and 192.168.100.0/29 has no host 10"),
    ("a link subnet holding the management address", _fleet(head="{ssh_hostname: 192.168.100.5, pair_role: head}"),
     "spark-1: pair_link_subnets: 192.168.100.0/24 holds 192.168.100.5, the address spark-1 is managed at"),
    ("the profile on an older image", _fleet(image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"),
     "pair_a (spark-1, spark-2): image: 'nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6' is TensorRT-LLM 1.2.0rc6; profile "
     "qwen3_eagle3_pair needs 1.3.0rc12 or newer"),
    ("the profile on an image whose tag names no version", _fleet(image="registry.lab/trtllm:latest"),
     "pair_a (spark-1, spark-2): image: 'registry.lab/trtllm:latest' names no TensorRT-LLM version in its tag"),
    ("the two ends on other images", _fleet(worker="{ssh_hostname: 10.0.0.12, pair_role: worker, "
                                                   "image: 'nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13'}"),
     "spark-2: image: 'nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc13' differs from spark-1's"),
    ("the two-Spark profile on a host outside a pair", _fleet(more="spark-3: {ssh_hostname: 10.0.0.13}"),
     "spark-3: profile: qwen3_eagle3_pair runs on two Sparks as one server; spark-3 is in no pair_* group"),
    ("a role on a host outside a pair", _fleet(more="spark-3: {ssh_hostname: 10.0.0.13, pair_role: head}"),
     "spark-3: pair_role: head, but spark-3 is in no pair_* group"),
    ("a host in two pairs", _fleet(pair_more="    pair_b:\n      hosts:\n        spark-2:\n"
                                             "        spark-3: {ssh_hostname: 10.0.0.13, pair_role: head}\n"),
     "spark-2: pair_b: spark-2 is also in pair_a (allowed: one pair per host)"),
    ("a pair host that is also a gateway", _fleet(pair_more="    gateway:\n      hosts:\n        spark-2:\n"),
     "spark-2: pair_a: spark-2 is also in gateway"),
]


@pytest.mark.parametrize("what,fleet,line", BAD, ids=[b[0] for b in BAD])
def test_check_refuses_a_malformed_pair(fleet_file, what, fleet, line):
    fleet_file(fleet)
    result = _check()
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x]
    assert any(x.startswith(line) for x in lines), lines
    assert "Traceback" not in result.output
    assert all(x.count(": ") >= 2 for x in lines), "one HOST: KEY: line per problem"


def test_a_single_spark_profile_on_a_pair_host_is_refused_unless_it_serves_the_pair(fleet_file):
    fleet_file(_fleet(more="spark-3: {ssh_hostname: 10.0.0.13}"))
    lines = _check("deploys/eagle3.py").output.splitlines()
    assert any(x.startswith("spark-1: profile: eagle3 runs on one Spark; spark-1 is half of pair_a") for x in lines)
    # `serves` on the pair: the single-Spark deploy skips it, and serves spark-3 (the other hosts as in a fleet without a pair)
    fleet_file(_fleet(more="spark-3: {ssh_hostname: 10.0.0.13}",
                      pair_more="      vars: {serves: qwen3_eagle3_pair}\n"))
    result = _check("deploys/eagle3.py")
    assert result.exit_code == 0, result.output


def test_without_a_pair_group_lock_and_check_see_no_pair(fleet_file):
    path = fleet_file("all:\n  hosts:\n    spark-01:\n    spark-02:\n")
    fleets, errors, notes = fleets_to_lock(load_inventory(path), None)
    assert sorted(fleets) == sorted(p for p in profiles() if nodes(p) == 1) and not errors and not notes
    assert "qwen3_eagle3_pair" not in fleets
    path = fleet_file(_fleet(more="spark-3: {ssh_hostname: 10.0.0.13}",
                             pair_more="      vars: {serves: qwen3_eagle3_pair}\n"))
    fleets, errors, notes = fleets_to_lock(load_inventory(path), None)
    assert sorted(fleets["qwen3_eagle3_pair"]) == ["spark-1", "spark-2"] and not errors
    assert fleets["eagle3"]["spark-3"].profile_name == "eagle3"
    assert fleets["eagle3"]["spark-1"].profile is None  # skipped: it serves the pair's profile


def test_a_deploy_renders_both_hosts_of_a_pair(fleet_file):
    fleet_file(_fleet())
    for host, unit_has in (("spark-1", "mpirun"), ("spark-2", "pair-agent")):
        result = CliRunner().invoke(main, ["render", "inventory.py", PAIR_DEPLOY, host])
        assert result.exit_code == 0 and unit_has in result.output, (host, result.output[-2000:])


def test_behind_a_gateway_only_the_head_is_a_backend(fleet_file):
    path = fleet_file(_fleet(more="spark-3: {ssh_hostname: 10.0.0.13, serves: eagle3}",
                             pair_more="      vars: {serves: qwen3_eagle3_pair}\n"
                                       "    gateway:\n      hosts:\n        gw-1: {ssh_hostname: 10.0.0.1}\n"))
    fleet, problems = build_fleet(read_fleet(load_inventory(path)), None)
    assert problems == []
    backends = fleet["gw-1"].gateway_backends
    assert sorted(backends) == ["spark-1", "spark-3"], backends  # spark-2, the pair's worker, is no backend
    assert backends["spark-1"][0] == "nvidia/Qwen3-235B-A22B-FP4"


# ---- what only the host can tell: the preflight of a pair host (its status read) -----------------------------------
LINKS = {"enp1s0f1np1": ("up", None), "enP2p1s0f1np1": ("up", None)}  # virtio-like: no speed reported
IFACES = ["lo", "eth0", "enp1s0f1np1", "enP2p1s0f1np1"]


def _pair_plans():
    host = {"pair_role": "head", "image": IMAGE}
    return make_plans({"spark-1": {**host, "ssh_hostname": "10.0.0.11"},
                       "spark-2": {**host, "pair_role": "worker", "ssh_hostname": "10.0.0.12"}},
                      "qwen3_eagle3_pair", groups={"pair_a": ["spark-1", "spark-2"]})


def _host_status(addresses=(("lo", "127.0.0.1/8"), ("eth0", "10.0.0.11/24")), links=None, interfaces=IFACES):
    from specfleet.fleet.status import SpecfleetHost
    st = SpecfleetHost.default()
    st.platform.docker, st.platform.runtimes, st.platform.free_bytes = "ok", '{"nvidia":{}}', 10**15
    st.platform.gpu_hook = "/usr/bin/nvidia-container-runtime-hook"
    st.pair.interfaces, st.pair.addresses = list(interfaces), list(addresses)
    st.pair.links = dict(LINKS if links is None else links)
    return st


def _pair_clauses(st):
    from specfleet.serving.steps.preflight import problems_of
    return [p for p in problems_of(_pair_plans()["spark-1"], st) if p.startswith("pair_")]


def test_a_pair_host_with_its_link_and_apart_networks_passes_the_preflight():
    # its own link addresses on the link interfaces are what the deploy sets: no collision
    st = _host_status(addresses=(("lo", "127.0.0.1/8"), ("eth0", "10.0.0.11/24"),
                                 ("enp1s0f1np1", "192.168.100.10/24"), ("docker0", "172.17.0.1/16")))
    assert _pair_clauses(st) == []
    assert _pair_clauses(_host_status(links={**LINKS, "enp1s0f1np1": ("up", 200000)})) == []


@pytest.mark.parametrize("what, st, clause", [
    ("a link interface the host lacks",
     _host_status(links={**LINKS, "enP2p1s0f1np1": ("missing", None)}, interfaces=["lo", "eth0", "enp1s0f1np1"]),
     "pair_link_interfaces: enP2p1s0f1np1 does not exist on this host (allowed: its interfaces, eth0, enp1s0f1np1)"),
    ("a link slower than NVIDIA's 200000 Mb/s, where the driver says",
     _host_status(links={**LINKS, "enp1s0f1np1": ("up", 100000)}),
     "pair_link_min_speed_mbps: enp1s0f1np1 runs at 100000 Mb/s (allowed: at least 200000; check the cable and "
     "`ethtool enp1s0f1np1`)"),
    ("a link subnet the management network is in",
     _host_status(addresses=(("eth0", "192.168.100.7/24"),)),
     "pair_link_subnets: 192.168.100.0/24 overlaps 192.168.100.7/24 on eth0, which is not a link interface (allowed: "
     "link subnets no other network of the host uses)"),
    ("a link subnet inside a wider network of the host",
     _host_status(addresses=(("wg0", "192.168.0.1/16"),)),
     "pair_link_subnets: 192.168.100.0/24 overlaps 192.168.0.1/16 on wg0, which is not a link interface (allowed: "
     "link subnets no other network of the host uses)"),
])
def test_the_preflight_refuses_what_only_the_pair_host_can_tell(what, st, clause):
    clauses = _pair_clauses(st)
    assert clause in clauses, (what, clauses)
    assert len(clauses) == 1 + ("wider" in what), (what, clauses)  # a /16 holds both link subnets


def test_the_status_read_reports_a_pair_hosts_interfaces_addresses_and_links(tmp_path):
    import subprocess

    from specfleet.fleet.status import SpecfleetHost
    from tests.unit.fakehost import status_command

    def read(links):
        command = status_command(str(tmp_path), LINKS="\n".join(links))
        return SpecfleetHost().process(subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                                                      timeout=60).stdout.splitlines()).pair

    st = read(("lo", "nosuch0"))
    assert "lo" in st.interfaces and ("lo", "127.0.0.1/8") in st.addresses, (st.interfaces, st.addresses)
    assert st.links == {"lo": ("unknown", None), "nosuch0": ("missing", None)}  # lo reports no speed, like virtio
    st = read(())  # not a pair host: nothing of this is read
    assert (st.interfaces, st.addresses, st.links) == ([], [], {})
