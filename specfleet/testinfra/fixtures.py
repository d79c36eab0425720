"""Fixtures of the testinfra suite (a project's tests/infra/conftest.py imports them).

testinfra against ANY specfleet inventory: the one SPECFLEET_INVENTORY names (the VM fleet in CI, or
real Sparks), else the project's inventory/fleet.yml (the project is the current directory). Each test
runs once per host; what the host should look like is computed by specfleet itself from the same
inventory (settings, render) and from the release the host records."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import testinfra

from specfleet.fleet.inventory import Inventory
from specfleet.fleet.profiles import ProfileError
from specfleet.plan import HostPlan, PlanError, build_plans, load_inventory_or_fail

_INVENTORY: Inventory | None
try:
    _INVENTORY = load_inventory_or_fail()
    _HOSTS = list(_INVENTORY.hosts)
except (PlanError, ProfileError):  # no inventory configured: every test here is skipped (empty parameter set)
    _INVENTORY, _HOSTS = None, []


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "real_gpu: runs only against real DGX Sparks (inventory with gpus: true)")


@dataclass
class Spark:
    name: str
    host: testinfra.host.Host
    plan: HostPlan  # built for the profile the host's current release serves
    release: dict
    gate: dict  # the host's gate.json: the last switch's readiness gate (a pair's worker: its side, role worker)

    @property
    def pair_role(self) -> str | None:
        """`head` or `worker` when the current release is a two-Spark pair's, else None."""
        return (self.release.get("pair") or {}).get("role")

    def skip_a_worker(self) -> None:
        """The endpoint checks are the head's: a pair's worker holds its side (the head's release), serves nothing."""
        if self.pair_role == "worker":
            pytest.skip(f"{self.name} is a pair's worker: the pair serves through its head")

    @property
    def s(self):
        return self.plan.settings


def _connect(name: str, conn: dict) -> testinfra.host.Host:
    user = conn.get("ssh_user", "root")
    spec = f"ssh://{user}@{conn.get('ssh_hostname', name)}:{conn.get('ssh_port', 22)}"
    extra = []
    if conn.get("ssh_known_hosts_file"):
        extra.append(f"-o UserKnownHostsFile={conn['ssh_known_hosts_file']}")
    if str(conn.get("ssh_strict_host_key_checking", "")).lower() == "no":
        extra.append("-o StrictHostKeyChecking=no")
    return testinfra.get_host(spec, ssh_identity_file=conn.get("ssh_key"), ssh_extra_args=" ".join(extra) or None,
                              sudo=bool(conn.get("_sudo")), timeout=30,
                              controlpath=f"/tmp/specfleet-testinfra-{name}-{conn.get('ssh_port', 22)}")


@pytest.fixture(scope="session", params=_HOSTS)
def spark(request) -> Spark:
    name = request.param
    assert _INVENTORY is not None  # a host to test comes from the inventory
    base = build_plans(_INVENTORY, None, resolve=False)[name]
    host = _connect(name, base.connection)
    current = host.file(base.paths.current_record)
    if not current.exists:
        pytest.fail(f"{name}: no current release ({current.path} missing): converge it first")
    release = json.loads(current.content_string)
    with host.sudo():
        gate = host.file(base.paths.gate_file)
        gate = json.loads(gate.content_string) if gate.exists else {}
    plan = build_plans(_INVENTORY, release["profile"], resolve=True)[name]
    return Spark(name, host, plan, release, gate)
