"""Bringing a fleet up and down, whichever driver runs its hosts. `up`: clear the workdir, build or find the image of
each architecture, let the driver create and start the hosts, wait until systemd is up in all of them, write the
inventory (fleet.json after every step, so that `down` and another process can always find the hosts). `down`: the
driver stops what the fleet started and removes its runtime files (console logs are kept)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .arch import DEFAULT_ARCH, guest_arches
from .drivers import Driver, choose, driver_from_json, sweep_engines
from .errors import VMError
from .host import OPERATOR, Host
from .image import ImageInfo, build_image
from .local import default_workdir, lab_root, resolve
from .state import Fleet, fleet_json, load, write_fleet_json, write_inventory

log = logging.getLogger(__name__)

FIRST_HOST = 11  # host numbers on a shared network: spark-1 is .11, spark-2 .12, ...; a joining fleet says its own


@dataclasses.dataclass
class Bringup:
    """What `up` has decided so far; the driver adds its hosts, and `save` writes it all to fleet.json."""
    workdir: Path
    driver: Driver
    arches: list  # one per host
    images: dict  # arch -> ImageInfo, in the order of `arches`
    memory_mb: int
    timings: dict
    network: object  # the driver's shared network the hosts join (None: none)
    lan_first: int
    pair_link: bool
    smp: int | None = None
    accel: str | None = None
    cache_dir: Path | None = None
    hosts: list = dataclasses.field(default_factory=list)

    @property
    def first(self) -> ImageInfo:
        return self.images[self.arches[0]]

    @property
    def key(self) -> Path:
        """One key for the fleet (each image has its own; the hosts of other arches get it authorized)."""
        return self.first.key

    def save(self) -> None:
        write_fleet_json(self.workdir, self.driver, self.hosts, self.key, self.timings, self.images)


def up(count: int | None = None, workdir=None, cache_dir=None, memory_mb: int = 2048, smp: int | None = None,
       accel: str | None = None, arch=None, lan=False, lan_first: int = FIRST_HOST, pair_link: bool = False,
       driver: Driver | str | None = None) -> Fleet:
    """Build/reuse the image(s), start the hosts, wait for SSH + systemd, write the inventory.

    `arch`: one architecture for all `count` hosts (default x86_64, count default 3), or a list / comma-separated
    string with one architecture per host (`"x86_64,arm64"`). One image per architecture; all hosts use the same
    SSH key (the first image's).
    `lan`: True for a shared network of its own, or another fleet's `network` to join, its hosts numbered from
    `lan_first`; default: none where the driver can do without (a container host is always on one).
    `pair_link`: the first two hosts are a pair, joined by a stand-in CX-7 link of their own, its interfaces named
    like a Spark's before `up` returns; every host of such a fleet runs the pair's image (recipe.PAIR_PACKAGES).
    `driver`: a Driver, or its name (`qemu`, `container`); None: SPECFLEET_LAB_DRIVER, else the default
    (drivers.choose, which falls back to QEMU with one line where containers cannot run)."""
    arches = guest_arches(count, arch)
    drv = driver if isinstance(driver, Driver) else choose(driver, arches=arches, workdir=workdir)
    workdir = resolve(workdir, default_workdir)
    _clear_workdir(workdir)
    _registry(workdir).write_text(f"{workdir}\n")
    timings: dict = {"driver": drv.name}
    images = _images(arches, cache_dir, timings, pair_link, drv)
    network = drv.new_network() if lan is True else (lan or (drv.new_network() if drv.needs_network else None))
    b = Bringup(workdir=workdir, driver=drv, arches=arches, images=images, memory_mb=memory_mb, timings=timings,
                network=network, lan_first=lan_first, pair_link=pair_link, smp=smp, accel=accel,
                cache_dir=resolve(cache_dir, lambda: Path("~/.cache/specfleet")))
    t_boot = time.monotonic()
    try:
        drv.create(b)
        b.save()
        drv.start(b)
        b.save()
        states = _wait_all(b.hosts, timings)
        if len({h.key_path for h in b.hosts}) > 1:
            _unify_keys(b.hosts, b.key)
        fleet = Fleet(guests=b.hosts, workdir=workdir, inventory_path=workdir / "inventory.yml", key_path=b.key,
                      timings=timings, driver=drv)
        drv.ready(fleet, b)
    except BaseException:
        log.error("bringing up the fleet failed; tearing down (console logs kept in %s)", workdir)
        with contextlib.suppress(Exception):
            down(workdir)
        raise
    timings["boot_s"] = round(time.monotonic() - t_boot, 1)
    timings["states"] = states
    log.info("%d %s host(s) up in %.0f s: %s", len(arches), drv.name, timings["boot_s"],
             ", ".join(f"{h.name}({h.arch})={h.ssh_host}:{h.ssh_port}" for h in b.hosts))
    write_inventory(fleet.inventory_path, b.hosts, b.key)
    b.save()
    return fleet


def _clear_workdir(workdir: Path) -> None:
    """Refuse a workdir whose fleet still runs; remove the files of a dead one."""
    workdir.mkdir(parents=True, exist_ok=True)
    if fleet_json(workdir).exists():
        old = load(workdir)
        alive = [g.name for g in old.guests if g.is_running()]
        if alive:
            raise VMError(f"a fleet is already running in {workdir} ({', '.join(alive)}); "
                          f"run `specfleet-lab down --workdir {workdir}` first")
        down(workdir)  # stale files of a dead fleet


def _images(arches: list, cache_dir, timings: dict, pair: bool, drv: Driver) -> dict[str, ImageInfo]:
    """Build or find each architecture's image once, in the order given (`pair`: a pair's, recipe.PAIR_PACKAGES);
    record the image timings."""
    images: dict[str, ImageInfo] = {}
    for a in dict.fromkeys(arches):  # each architecture once, in the order given
        images[a] = build_image(cache_dir, arch=a, pair=pair)
    first = images[arches[0]]
    timings["image_cached"] = all(i.cached for i in images.values())
    built = sum(i.seconds for i in images.values() if i.built)
    timings["image_build_s" if built else "image_lookup_s"] = round(
        built or sum(i.seconds for i in images.values()), 1)
    timings["image_size_bytes"] = sum(i.size_bytes for i in images.values())
    if len(images) > 1 or first.arch != DEFAULT_ARCH:
        timings["images"] = {a: {"cached": i.cached, "seconds": round(i.seconds, 1), "dir": str(i.dir)}
                             for a, i in images.items()}
    return images


def _unify_keys(hosts: Sequence[Host], key: Path) -> None:
    """A mixed fleet: authorize the fleet key (the first image's) for the operator on the hosts of the other images,
    and switch them to it, so that the inventory has a single ssh_key."""
    pub = Path(str(key) + ".pub").read_bytes()
    for h in hosts:
        if h.key_path != key:
            h.ssh(f"cat >> ~{OPERATOR}/.ssh/authorized_keys", user=OPERATOR, input=pub)
            h.key_path = key
            h.ssh("true", user=OPERATOR)


def _wait_all(hosts: Sequence[Host], timings: dict) -> dict[str, str]:
    """Wait until every host answers SSH and systemd is up; their states and boot seconds (timings)."""
    results: dict[str, str] = {}
    seconds: dict[str, float] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def one(h: Host) -> None:
        t0 = time.monotonic()
        try:
            state = h.wait_ready()
            with lock:
                results[h.name], seconds[h.name] = state, round(time.monotonic() - t0, 1)
            log.info("%s (%s) ready (%s) after %.1f s", h.name, h.arch, state, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - collected and re-raised below
            with lock:
                errors.append(str(e))

    threads = [threading.Thread(target=one, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise VMError("\n\n".join(errors))
    timings["boot_s_per_guest"] = seconds
    return results


def _registry(workdir: Path | None = None) -> Path:
    """The registry of fleets up, machine-wide (`down --all` finds them there): a file per workdir."""
    d = lab_root() / "fleets"
    d.mkdir(parents=True, exist_ok=True)
    return d / hashlib.sha256(str(workdir).encode()).hexdigest()[:16] if workdir else d


def down_all() -> list[str]:
    """`specfleet-lab down --all`: every fleet up on this machine, and every container engine of the lab (also those
    a killed run left); the workdirs taken down."""
    done = []
    for entry in sorted(_registry().iterdir()):
        workdir = Path(entry.read_text().strip())
        down(workdir)
        entry.unlink(missing_ok=True)
        done.append(str(workdir))
    sweep_engines(everything=True)
    return done


def down(workdir=None) -> None:
    """Stop what this fleet started and remove its runtime files. Console logs are kept. Safe to run twice and
    when nothing is up."""
    workdir = resolve(workdir, default_workdir)
    _registry(workdir).unlink(missing_ok=True)
    if not workdir.is_dir():
        return
    data: dict = {}
    with contextlib.suppress(FileNotFoundError, ValueError):
        data = json.loads(fleet_json(workdir).read_text())
    driver_from_json(data.get("driver")).stop(workdir, data)
    for name in ("fleet.json", "fleet.json.tmp", "inventory.yml", "inventory.yml.tmp"):
        with contextlib.suppress(FileNotFoundError):
            (workdir / name).unlink()
