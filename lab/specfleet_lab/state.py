"""A fleet's persisted state, molecule-style: WORKDIR/fleet.json (driver, hosts, key, images, timings; rewritten
atomically after each step of `up`, so that `down` and another process can always find the hosts),
WORKDIR/inventory.yml (pyinfra's inventory of the hosts), and the `Fleet` handle `up` and `load` return."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from .arch import ARCHES
from .drivers import Driver, driver_from_json
from .errors import VMError
from .host import OPERATOR, Host, as_user
from .local import default_workdir, resolve


@dataclasses.dataclass
class Fleet:
    guests: list[Host]
    workdir: Path
    inventory_path: Path
    key_path: Path
    timings: dict = dataclasses.field(default_factory=dict)
    driver: Driver | None = None

    @property
    def network(self):
        """The shared network its hosts are on: pass it to up(lan=...) to bring up a host that joins."""
        return self.guests[0].network if self.guests else None

    @property
    def controller_address(self) -> str:
        """The controller as the hosts see it (a stand-in served by the controller is reached there)."""
        return self.driver.controller_address

    def pause(self) -> list[str]:
        """Freeze every running host (its CPUs stop; memory and connections stay); the names of those paused."""
        running = [g for g in self.guests if g.is_running()]
        for g in running:
            g.pause()
        return [g.name for g in running]

    def resume(self) -> None:
        for g in self.guests:
            if g.is_running():
                g.resume()

    def __getitem__(self, name: str) -> Host:
        for g in self.guests:
            if g.name == name:
                return g
        raise KeyError(name)

    def _parallel(self, fn, guests: Sequence[Host] | None = None) -> dict:
        guests = list(guests or self.guests)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(guests))) as ex:
            futs = {g.name: ex.submit(fn, g) for g in guests}
            return {name: f.result() for name, f in futs.items()}

    def ssh_all(self, cmd: str, **kw) -> dict[str, subprocess.CompletedProcess]:
        return self._parallel(lambda g: g.ssh(cmd, **kw))

    def load_image(self, tarball: Path, tag: str, changes: Sequence[str] = (),
                   guests: Sequence[Host] | None = None) -> dict[str, float]:
        """Stream a rootfs tarball into `docker import - TAG` on every guest (or on `guests`; a tarball
        holds one architecture's binaries) in parallel, over the operator's SSH session through sudo (one
        pass: no copy of the tarball on the guest's disk), with `--change` instructions. Returns seconds
        per guest."""
        tarball = Path(tarball)
        import_cmd = " ".join(["docker import", *(f"--change {shlex.quote(c)}" for c in changes),
                               "-", shlex.quote(tag)])
        remote = as_user("root", import_cmd)

        def one(g: Host) -> float:
            t0 = time.monotonic()
            argv = [*g.ssh_base(), f"{OPERATOR}@{g.ssh_host}", remote]
            with open(tarball, "rb") as f:
                try:
                    p = subprocess.run(argv, stdin=f, capture_output=True, timeout=1800)
                except subprocess.TimeoutExpired as e:
                    raise VMError(f"{g.name}: docker import of {tarball} as {tag} timed out after 1800 s") from e
            if p.returncode != 0:
                raise VMError(f"{g.name}: docker import of {tarball} as {tag} failed (rc={p.returncode}): "
                              f"{p.stderr.decode('utf-8', 'replace').strip()[-2000:]}")
            return time.monotonic() - t0

        return self._parallel(one, guests)


def fleet_json(workdir: Path) -> Path:
    return workdir / "fleet.json"


def write_fleet_json(workdir: Path, driver: Driver, hosts: Sequence[Host], key: Path, timings: dict,
                     images: dict | None = None) -> None:
    images = images or {}
    data = {"workdir": str(workdir), "key_path": str(key), "driver": driver.to_json(),
            "inventory_path": str(workdir / "inventory.yml"),
            "images": {arch: str(info.dir) for arch, info in images.items()},
            "guests": [g.to_json() for g in hosts], "timings": timings}
    tmp = fleet_json(workdir).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, fleet_json(workdir))


def write_inventory(path: Path, guests: Sequence[Host], key: Path) -> None:
    """The fleet's inventory: every guest in group vm_fleet, and in vm_<arch> (vm_x86_64, vm_arm64) for
    its architecture, so a run can be limited to one arch (`--limit vm_arm64`). No per-host data beyond
    the connection: the deploy reads a host's architecture from the host itself, as on real Sparks."""
    children: dict = {"vm_fleet": {"hosts": {
        g.name: {"ssh_hostname": g.ssh_host, "ssh_port": g.ssh_port,
                 **({"fleet_address": g.lan_address} if g.lan_address else {})} for g in guests}}}
    for arch in ARCHES:
        names = [g.name for g in guests if g.arch == arch]
        if names:
            children[f"vm_{arch}"] = {"hosts": {n: {} for n in names}}
    inv = {"all": {
        # as on DGX OS: an operator account with password-less sudo, no root SSH
        "vars": {"ssh_user": OPERATOR, "_sudo": True, "ssh_key": str(key),
                 "ssh_known_hosts_file": "/dev/null", "ssh_strict_host_key_checking": "no"},
        "children": children,
    }}
    tmp = path.with_suffix(".yml.tmp")
    tmp.write_text(yaml.safe_dump(inv, sort_keys=False, default_flow_style=False))
    os.replace(tmp, path)


def load(workdir=None) -> Fleet:
    """Re-attach to a fleet brought up (possibly by another process) in `workdir`."""
    workdir = resolve(workdir, default_workdir)
    try:
        data = json.loads(fleet_json(workdir).read_text())
    except FileNotFoundError:
        raise VMError(f"no fleet in {workdir} (no fleet.json); run `specfleet-lab up`") from None
    driver = driver_from_json(data.get("driver"))
    return Fleet(guests=[driver.host_from_json(g) for g in data["guests"]], workdir=workdir,
                 inventory_path=Path(data["inventory_path"]), key_path=Path(data["key_path"]),
                 timings=data.get("timings", {}), driver=driver)
