"""A fleet's persisted state, molecule-style: WORKDIR/fleet.json (guests, key, images, timings; rewritten
atomically after each step of `up`, so that `down` and another process can always find the guests),
WORKDIR/inventory.yml (pyinfra's inventory of the guests), and the `Fleet` handle `up` and `load` return."""

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
from .errors import VMError
from .guest import OPERATOR, Guest, as_user
from .image import ImageInfo
from .local import default_workdir, resolve


@dataclasses.dataclass
class Fleet:
    guests: list[Guest]
    workdir: Path
    inventory_path: Path
    key_path: Path
    timings: dict = dataclasses.field(default_factory=dict)

    @property
    def lan(self):
        """The shared guest network (lan.py) its guests are on: pass it to up() to bring up a guest that joins."""
        return self.guests[0].lan if self.guests else None

    def __getitem__(self, name: str) -> Guest:
        for g in self.guests:
            if g.name == name:
                return g
        raise KeyError(name)

    def _parallel(self, fn, guests: Sequence[Guest] | None = None) -> dict:
        guests = list(guests or self.guests)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(guests))) as ex:
            futs = {g.name: ex.submit(fn, g) for g in guests}
            return {name: f.result() for name, f in futs.items()}

    def ssh_all(self, cmd: str, **kw) -> dict[str, subprocess.CompletedProcess]:
        return self._parallel(lambda g: g.ssh(cmd, **kw))

    def load_image(self, tarball: Path, tag: str, changes: Sequence[str] = (),
                   guests: Sequence[Guest] | None = None) -> dict[str, float]:
        """Stream a rootfs tarball into `docker import - TAG` on every guest (or on `guests`; a tarball
        holds one architecture's binaries) in parallel, over the operator's SSH session through sudo (one
        pass: no copy of the tarball on the guest's disk), with `--change` instructions. Returns seconds
        per guest."""
        tarball = Path(tarball)
        import_cmd = " ".join(["docker import", *(f"--change {shlex.quote(c)}" for c in changes),
                               "-", shlex.quote(tag)])
        remote = as_user("root", import_cmd)

        def one(g: Guest) -> float:
            t0 = time.monotonic()
            argv = [*g.ssh_base(), f"{OPERATOR}@{g.host}", remote]
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


def write_fleet_json(workdir: Path, guests: Sequence[Guest], key: Path, timings: dict,
                     image: ImageInfo | None = None, images: dict | None = None) -> None:
    images = images or ({image.arch: image} if image else {})
    data = {"workdir": str(workdir), "key_path": str(key),
            "inventory_path": str(workdir / "inventory.yml"),
            "image": str(image.dir) if image else None,
            "images": {arch: str(info.dir) for arch, info in images.items()},
            "guests": [g.to_json() for g in guests], "timings": timings}
    tmp = fleet_json(workdir).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, fleet_json(workdir))


def write_inventory(path: Path, guests: Sequence[Guest], key: Path) -> None:
    """The fleet's inventory: every guest in group vm_fleet, and in vm_<arch> (vm_x86_64, vm_arm64) for
    its architecture, so a run can be limited to one arch (`--limit vm_arm64`). No per-host data beyond
    the connection: the deploy reads a host's architecture from the host itself, as on real Sparks."""
    children: dict = {"vm_fleet": {"hosts": {
        g.name: {"ssh_hostname": g.host, "ssh_port": g.port,
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
    return Fleet(guests=[Guest.from_json(g) for g in data["guests"]], workdir=workdir,
                 inventory_path=Path(data["inventory_path"]), key_path=Path(data["key_path"]),
                 timings=data.get("timings", {}))
