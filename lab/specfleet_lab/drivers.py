"""The drivers behind the seam, as Molecule has them: an abstract `Driver`, a registry of the concrete ones (imported
when first asked for, as testinfra's backends are), and `choose`, which takes the one asked for or the default and
falls back to QEMU, with one line saying why, where containers cannot run.

A driver says how the hosts of a fleet are created, started and stopped, how they and the controller reach each
other (`controller_address`: the controller as the hosts see it; `bind_address`: where a server of the controller
listens for them), and what a fleet's shared network is. Everything it started is recorded in fleet.json, so that
`down` from another process finds it."""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path

from .errors import VMError

log = logging.getLogger(__name__)

#: name -> "module:class", imported on first use
REGISTRY = {"qemu": "specfleet_lab.qemu.driver:QemuDriver",
            "container": "specfleet_lab.container.driver:ContainerDriver"}
DEFAULT = "container"


class Driver:
    """What a driver does for `up` and `down` (fleet.py), and what the harness asks of it."""

    name = "base"
    needs_network = False  # whether every fleet is on a shared network (a container host is reached on one)
    controller_address = ""  # the controller as the hosts see it (the stand-ins' address in their URLs)
    bind_address = ""  # where a controller-side server (Hub stand-in, wheelhouse) listens so that only hosts reach it

    def why_not(self, arches: list) -> str | None:
        """Why this driver cannot run `arches` here (None: it can)."""
        return None

    def new_network(self):
        """A shared network of its own (JSON-able); a fleet joining another's is given that one."""
        raise NotImplementedError

    def create(self, b) -> None:
        """Create the hosts of a fleet.Bringup (b.hosts), without starting them."""
        raise NotImplementedError

    def start(self, b) -> None:
        """Start every host of b.hosts (not waiting for them)."""
        raise NotImplementedError

    def ready(self, fleet, b) -> None:
        """After every host answered: what the driver finishes (a pair link's interface names)."""

    def stop(self, workdir: Path, data: dict) -> None:
        """`down`: stop and remove what the fleet recorded in fleet.json (`data`; {} when it is lost)."""
        raise NotImplementedError

    def host_from_json(self, d: dict):
        raise NotImplementedError

    def leftovers(self, workdir: Path) -> list[str]:
        """What of the fleet in `workdir` still exists on the machine (processes, containers, mounts, disks): none
        once it is down."""
        raise NotImplementedError

    def to_json(self) -> dict:
        return {"name": self.name}

    def close(self) -> None:
        """Stop what the driver itself runs (an engine); its fleets are down by then."""


def driver_class(name: str):
    try:
        module, cls = REGISTRY[name].split(":")
    except KeyError:
        raise VMError(f"unknown lab driver {name!r} (known: {', '.join(REGISTRY)})") from None
    return getattr(importlib.import_module(module), cls)


def driver_from_json(d: dict | None) -> Driver:
    """The driver a fleet.json names (a fleet from before drivers existed: QEMU)."""
    d = d or {"name": "qemu"}
    return driver_class(d["name"]).from_json(d)


def choose(name: str | None = None, arches: list | None = None, workdir=None, session: bool = False,
           say=log.warning) -> Driver:
    """The driver asked for (`name`, else SPECFLEET_LAB_DRIVER, else DEFAULT). When the default cannot run here,
    QEMU, and `say` gets one line naming why; a driver asked for by name that cannot run is an error. `session`: the
    caller closes the driver (Driver.close) when it is done with every fleet; otherwise the fleet's `down` does."""
    asked = name or os.environ.get("SPECFLEET_LAB_DRIVER")
    owner = f"session:{os.getpid()}" if session else None
    drv = driver_class(asked or DEFAULT).create_for(workdir, owner)
    why = drv.why_not(arches or [])
    if why is None:
        return drv
    if asked:
        raise VMError(f"the {drv.name} driver cannot run here: {why}")
    say(f"lab driver: qemu, not {drv.name}: {why}")
    return driver_class("qemu").create_for(workdir, owner)


def sweep_engines(everything: bool = False) -> list[str]:
    """The container engines of runs whose owner is gone (`everything`: all of them), stopped; their run ids."""
    return driver_class("container").sweep(everything)
