"""The VM tier's gateway: one more host on the session fleet's shared network, in the
inventory group `gateway`, in front of the session's Sparks; the load client (load_client.py) run in a guest; the
gateway's pool read over its runtime API. Used by test_rollout.py in the --full tier."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import specfleet_lab
from specfleet.gateway.status import admin_command
from tests.vm import lab

GATEWAY = "gw-1"  # the gateway guest's inventory name
GATEWAY_LAN_HOST = 21  # its host number on the session fleet's network (the Sparks are .11, .12, ...)
KEY = "sk-lab-" + "7f3a9c" * 6  # the clients' API key (a lab value; the test searches the guest's disk for it)
LOAD_CLIENT = Path(__file__).with_name("load_client.py")
CLIENT_PATH = "/tmp/specfleet-load-client.py"
STOP_FILE = "/tmp/specfleet-load-stop"


def boot(session_fleet, workdir: Path, cache_dir: Path):
    """One host joining the session fleet's network as host .21 (on its driver); torn down by the caller
    (specfleet_lab.down)."""
    return specfleet_lab.up(count=1, workdir=workdir, cache_dir=cache_dir, lan=session_fleet.network,
                            lan_first=GATEWAY_LAN_HOST, driver=session_fleet.driver)


def inventory(base: Path, gateway_fleet, out: Path, keys_file: Path, serves: str = "eagle3", **gateway_vars) -> Path:
    """`base` (the lab's inventory) with the gateway guest in the group `gateway` and every Spark serving `serves`,
    locked (the base's lock first)."""
    keys_file.write_text(f"lab-client {KEY}\n")
    keys_file.chmod(0o600)
    inv = yaml.safe_load(base.read_text())
    g = gateway_fleet.guests[0]
    inv["all"]["children"]["vm_fleet"].setdefault("vars", {})["serves"] = serves
    inv["all"]["children"]["gateway"] = {
        # its own fleet's key: the same as the Sparks' in the session fleet, not a pair image's (test_pair.py)
        "hosts": {GATEWAY: {"ssh_hostname": g.ssh_host, "ssh_port": g.ssh_port, "fleet_address": g.lan_address,
                            "ssh_key": str(gateway_fleet.key_path)}},
        "vars": {"gateway_api_keys_file": str(keys_file), **gateway_vars}}
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    Path(f"{out}.lock").write_text(Path(f"{base}.lock").read_text())
    return lab.write_lock(out)


def without_gateway(inv_path: Path, out: Path) -> Path:
    """The same fleet file without its gateway group and the Sparks' `serves`."""
    inv = yaml.safe_load(inv_path.read_text())
    del inv["all"]["children"]["gateway"]
    inv["all"]["children"]["vm_fleet"].get("vars", {}).pop("serves", None)
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    Path(f"{out}.lock").write_text(Path(f"{inv_path}.lock").read_text())
    return lab.write_lock(out)


def pool(gateway_guest) -> dict[str, str]:
    """Spark -> its status in the gateway's HAProxy (UP, DOWN, DRAIN (agent), MAINT, ...)."""
    out = gateway_guest.ssh(admin_command("state")).stdout
    return {row["server"]: row["status"] for row in json.loads(out)}


def clock_offset(guest) -> float:
    """The guest's clock minus the controller's, in seconds (to within half an SSH round trip)."""
    before = time.time()
    theirs = float(guest.ssh("date +%s.%N").stdout)
    after = time.time()
    return theirs - (before + after) / 2


@dataclass
class Load:
    """The load client running in `guest` until stop(): its records and summary (load_client.py's output)."""

    guest: object
    proc: subprocess.Popen
    records: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)

    def stop(self, timeout: float = 300) -> Load:
        self.guest.ssh(f"touch {STOP_FILE}")
        return self.collect(*self.proc.communicate(timeout=timeout))

    def collect(self, out: str, err: str) -> Load:
        for line in out.splitlines():
            item = json.loads(line)
            if "summary" in item:
                self.summary = item["summary"]
            else:
                self.records.append(item)
        assert self.summary, f"load client: no summary (rc={self.proc.returncode}): {err[-2000:]}"
        return self

    def failures(self) -> list[dict]:
        return [r for r in self.records if not r["ok"]]


def start_load(guest, url: str, key: str = "", **options) -> Load:
    """Start load_client.py in `guest` against `url` (its loopback or the lab's network); the key on stdin."""
    guest.ssh(f"cat > {CLIENT_PATH} && rm -f {STOP_FILE}", input=LOAD_CLIENT.read_bytes())
    args = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items())
    remote = f"python3 {CLIENT_PATH} --url {url} --stop-file {STOP_FILE} {args}" + (" --key-from-stdin" if key else "")
    argv = guest.ssh_argv(remote)
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(key + "\n" if key else "")
    proc.stdin.close()
    proc.stdin = None  # communicate() must not flush it again
    return Load(guest, proc)


def run_load(guest, url: str, key: str = "", **options) -> Load:
    """The load client to its count (or time) bound, in the foreground."""
    load = start_load(guest, url, key, **options)
    load.collect(*load.proc.communicate(timeout=float(options.get("seconds", 600)) + 120))
    return load
