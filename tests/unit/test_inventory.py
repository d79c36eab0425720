"""The Ansible-format fleet file: groups, precedence, and one-line errors (no tracebacks)."""

import subprocess
import sys

import pytest

from specfleet.fleet.inventory import InventoryError, load_inventory

FLEET = """
all:
  vars: {serve_port: 8000, restart_sec: 10, extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: 0.8}}}
  hosts:
    solo:
  children:
    lab:
      vars: {serve_port: 8100, restart_sec: 20}
      hosts:
        s1:
        s2: {serve_port: 8300, extra_llm_api_options: {speculative_config: {max_draft_len: 3}}}
      children:
        canary:
          vars: {serve_port: 8200}
          hosts:
            s2:
extra_top_group:
  hosts:
    s3:
"""


def test_groups_hosts_and_order(tmp_path):
    path = tmp_path / "f.yml"
    path.write_text(FLEET)
    inv = load_inventory(path)
    assert inv.hosts == ["solo", "s1", "s2", "s3"]
    assert inv.groups["lab"] == ["s1", "s2"] and inv.groups["canary"] == ["s2"]
    assert inv.groups["extra_top_group"] == ["s3"] and inv.groups["all"] == inv.hosts


def test_ansible_precedence(tmp_path):
    path = tmp_path / "f.yml"
    path.write_text(FLEET)
    v = load_inventory(path).host_vars
    assert v["solo"]["serve_port"] == 8000  # all
    assert v["s1"]["serve_port"] == 8100 and v["s1"]["restart_sec"] == 20  # group beats all
    assert v["s2"]["serve_port"] == 8300  # host beats child group beats parent group
    assert v["s2"]["restart_sec"] == 20
    # extra_llm_api_options is deep-merged across levels
    assert v["s2"]["extra_llm_api_options"] == {"kv_cache_config": {"free_gpu_memory_fraction": 0.8},
                                                "speculative_config": {"max_draft_len": 3}}


def test_child_group_beats_parent_without_host_vars(tmp_path):
    path = tmp_path / "f.yml"
    path.write_text(FLEET.replace("s2: {serve_port: 8300, extra_llm_api_options: {speculative_config: {max_draft_len: 3}}}", "s2:"))
    assert load_inventory(path).host_vars["s2"]["serve_port"] == 8200


MALFORMED = [
    ("all: [a, b]", "all: must be a mapping"),
    ("all:\n  hosts: [a, b]\n", "all.hosts: must be a mapping"),
    ("all:\n  hostz:\n    a:\n", "unknown key 'hostz'"),
    ("all:\n  hosts:\n    a: [1]\n", "host vars must be a mapping"),
    ("all:\n  hosts:\n    a:\n  vars: [x]\n", "all.vars: must be a mapping"),
    ("all:\n  hosts:\n    a:\n   b: {\n", "not valid YAML"),
    ("all:\n  children:\n    g:\n      hosts:\n", "no hosts defined"),
    ("", "top level must be a mapping"),
    ("all:\n  hosts:\n    'bad host':\n", "invalid host name"),
]


@pytest.mark.parametrize("text,message", MALFORMED)
def test_malformed_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "f.yml"
    path.write_text(text)
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert message in str(exc.value) and "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_pyinfra_stops_before_connecting_with_one_line(tmp_path):
    """The real pyinfra CLI with our inventory.py: bad input -> exit 2, one line per problem, no traceback."""
    path = tmp_path / "f.yml"
    path.write_text("all:\n  hosts:\n    spark-01: {ssh_hostname: 192.0.2.1, serve_prot: 1}\n")
    proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "inventory.py", "deploys/eagle3.py"],
                          env={"SPECFLEET_INVENTORY": str(path), "HF_TOKEN": "x", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "specfleet: spark-01: serve_prot: unknown variable (did you mean serve_port?)" in proc.stderr
    assert "Traceback" not in proc.stderr and "Connecting" not in proc.stderr + proc.stdout
