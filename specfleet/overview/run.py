"""What the read-only commands read from hosts: `specfleet status` (ONE read-only remote command per host, run
through pyinfra's API; overview/report.py makes the rows), `specfleet mirror status` (the mirror hosts' MirrorStatus)
and `specfleet logs HOST [-f] [-n N]` (the unit's journal over SSH with the inventory's connection data).

/metrics drains: trtllm-serve removes the iteration stats it returns. So `status` reads /metrics only with
`--metrics`, and even then not on a host whose run lock is held by a `specfleet bench` (its load client is
collecting those stats); the figures then cover the iterations since the previous reader, not since start."""

from __future__ import annotations

import json
import shlex
import subprocess

from pyinfra import host
from pyinfra.api import FactBase, deploy

from ..fleet import run as runner
from ..fleet.programs import program_text
from ..fleet.steps.state import current_plan
from ..gateway.status import GatewayPool
from ..host.layout import CONFIG_FILE, Layout
from ..mirror.status import MirrorState, MirrorStatus
from ..plan import HostPlan, PlanError
from ..serving.status import RELEASE_STATE

# Runs on the host with python3 (specfleet's host tools need it too) and prints one JSON object: a program of its
# own, specfleet/overview/host/overview.py, shipped in the one remote command, fed by THE reader of the release state.
_PROBE = program_text("overview.py")


class HostOverview(FactBase):
    """What `specfleet status` shows of a host, as one JSON object (one remote command)."""

    def command(self, data_dir: str, service: str, metrics: bool = False):
        lay = Layout(data_dir)
        args = [data_dir, service, "1" if metrics else "0", lay.releases, CONFIG_FILE]
        read_state = shlex.join(["python3", "-I", "-S", "-c", RELEASE_STATE, json.dumps(lay.release_paths())])
        return f"{read_state} | {shlex.join(['python3', '-c', _PROBE, *args])}"

    def process(self, output):
        try:
            return json.loads("\n".join(output))
        except ValueError:
            return {"error": "\n".join(output)[-300:] or "no output"}


@deploy("Status (read only)")
def collect(out: dict, metrics: bool):
    s = current_plan().settings
    out[host.name] = host.get_fact(HostOverview, data_dir=s.data_dir, service=s.serving_unit, metrics=metrics)


def read_overviews(plans: dict[str, HostPlan], hosts: list[str], metrics: bool) -> dict[str, dict]:
    """Each reachable host's HostOverview (the unreachable ones are left out)."""
    found: dict = {}
    failed = runner.run_on(plans, hosts, collect, found, metrics)
    return {h: v for h, v in found.items() if h not in failed}


@deploy("Read the mirror's status")
def collect_mirror(found: dict):
    s = current_plan().settings
    found[host.name] = host.get_fact(MirrorStatus, cache_dir=s.mirror_cache_dir, python=s.mirror_python,
                                     files=(), dirs=(), store=s.image_store_dir)


def read_mirrors(plans: dict[str, HostPlan], mirrors: list[str]) -> dict[str, MirrorState]:
    """Each reachable mirror host's status (one read-only command each)."""
    found: dict[str, MirrorState] = {}
    runner.run_on(plans, mirrors, collect_mirror, found)
    return found


@deploy("Read the gateway's pool")
def collect_gateway(found: dict):
    found[host.name] = host.get_fact(GatewayPool)


def read_gateways(plans: dict[str, HostPlan], gateways: list[str]) -> dict[str, dict]:
    """Each gateway's servers and their pool states (HAProxy's runtime API; unreachable ones: an error)."""
    found: dict[str, dict] = {}
    failed = runner.run_on(plans, gateways, collect_gateway, found)
    return {g: ({"error": "unreachable"} if g in failed else found.get(g) or {"error": "no answer"}) for g in gateways}


def ssh_argv(name: str, connection: dict, remote: str) -> list[str]:
    """ssh command line for a host from its inventory connection data (ssh_* vars, _sudo)."""
    if connection.get("ssh_password"):
        raise PlanError([f"{name}: ssh_password is set; "
                         "`specfleet logs` uses ssh with keys only (or run journalctl on the host)"])
    argv = ["ssh", "-o", "BatchMode=yes"]
    if connection.get("ssh_port"):
        argv += ["-p", str(connection["ssh_port"])]
    if connection.get("ssh_key"):
        argv += ["-i", str(connection["ssh_key"])]
    if connection.get("ssh_known_hosts_file"):
        argv += ["-o", f"UserKnownHostsFile={connection['ssh_known_hosts_file']}"]
    if connection.get("ssh_strict_host_key_checking"):
        argv += ["-o", f"StrictHostKeyChecking={connection['ssh_strict_host_key_checking']}"]
    target = connection.get("ssh_hostname") or name
    if connection.get("ssh_user"):
        target = f"{connection['ssh_user']}@{target}"
    if connection.get("_sudo"):
        remote = f"sudo -n {remote}"
    return [*argv, target, remote]


def follow_journal(argv: list[str]) -> int:
    """Run the ssh command of `specfleet logs` until it ends or Ctrl-C: 0 when it succeeded or was stopped, else 1."""
    proc = subprocess.Popen(argv)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        rc = 0
    return 0 if rc == 0 else 1
