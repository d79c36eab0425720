"""Bringing a fleet up and down. `up`: clear the workdir, build or find the image of each architecture,
choose accelerator and vCPUs, create one overlay per guest, start the guests, wait until systemd is up in all
of them, write the inventory (fleet.json after every step). `down`: stop the QEMU processes the fleet
started and remove its runtime files (console logs are kept)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .accel import choose_accel, default_smp
from .arch import DEFAULT_ARCH, guest_arches
from .errors import VMError
from .guest import OPERATOR, Guest, qemu_argv
from .image import ImageInfo, build_image
from .lan import FIRST_HOST, Lan, new_lan
from .local import default_workdir, free_port, read_pid, resolve, run, stop_qemu
from .pair_link import new_pair_link
from .state import Fleet, fleet_json, load, write_fleet_json, write_inventory

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Bringup:
    """What `up` has decided so far; each sub-step adds to it, and `save` writes it to fleet.json."""
    workdir: Path
    arches: list  # one per guest
    images: dict  # arch -> ImageInfo, in the order of `arches`
    memory_mb: int
    timings: dict
    accels: dict = dataclasses.field(default_factory=dict)  # arch -> tcg/kvm
    smps: dict = dataclasses.field(default_factory=dict)  # arch -> vCPUs per guest
    guests: list = dataclasses.field(default_factory=list)

    @property
    def first(self) -> ImageInfo:
        return self.images[self.arches[0]]

    @property
    def key(self) -> Path:
        """One key for the fleet (each image has its own; the guests of other arches get it authorized)."""
        return self.first.key

    def save(self) -> None:
        write_fleet_json(self.workdir, self.guests, self.key, self.timings, self.first, self.images)


def up(count: int | None = None, workdir=None, cache_dir=None, memory_mb: int = 2048,
       smp: int | None = None, accel: str | None = None, arch=None, lan: Lan | bool = False,
       lan_first: int = FIRST_HOST, pair_link: bool = False) -> Fleet:
    """Build/reuse the image(s), boot the guests, wait for SSH + systemd, write the inventory.

    `arch`: one architecture for all `count` guests (default x86_64, count default 3), or a list /
    comma-separated string with one architecture per guest (`"x86_64,arm64"`). One image per
    architecture; all guests use the same SSH key (the first image's).
    `lan`: True for a shared guest network of its own (lan.py), or another fleet's `lan` to join, its guests
    numbered from `lan_first`; default: none (each guest behind its own NAT only).
    `pair_link`: the first two guests are a pair, joined by a stand-in CX-7 link of their own (pair_link.py), its
    interfaces named like a Spark's before `up` returns; every guest of such a fleet boots the pair's image
    (recipe.PAIR_PACKAGES)."""
    arches = guest_arches(count, arch)
    workdir = resolve(workdir, default_workdir)
    _clear_workdir(workdir)
    timings: dict = {}
    b = _Bringup(workdir=workdir, arches=arches, images=_images(arches, cache_dir, timings, pair_link),
                 memory_mb=memory_mb, timings=timings)
    _choose_machine(b, cache_dir, accel, smp)
    b.guests = _create_guests(b, new_lan() if lan is True else (lan or None), lan_first)
    if pair_link:
        link = new_pair_link()
        for side, g in enumerate(b.guests[:2]):
            g.pair_link, g.pair_side = link, side
    b.save()
    _boot(b)
    log.info("%d guest(s) up in %.0f s: %s", len(arches), timings["boot_s"],
             ", ".join(f"{g.name}({g.arch})=127.0.0.1:{g.port}" for g in b.guests))
    inventory = workdir / "inventory.yml"
    write_inventory(inventory, b.guests, b.key)
    b.save()
    fleet = Fleet(guests=b.guests, workdir=workdir, inventory_path=inventory, key_path=b.key, timings=timings)
    if pair_link:  # name the link's NICs like a Spark's (the .link files stay in the guest)
        fleet._parallel(lambda g: g.ssh(g.pair_link.name_command(g.pair_side)), fleet.guests[:2])
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


def _images(arches: list, cache_dir, timings: dict, pair: bool = False) -> dict[str, ImageInfo]:
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


def _choose_machine(b: _Bringup, cache_dir, accel: str | None, smp: int | None) -> None:
    """The accelerator and vCPUs of each architecture's guests, and their timings."""
    count, timings, first = len(b.arches), b.timings, b.first
    t0 = time.monotonic()
    b.accels = {a: (accel or choose_accel(i, cache_dir)) for a, i in b.images.items()}
    timings["accel_choice_s"] = round(time.monotonic() - t0, 1)
    b.smps = {a: smp or default_smp(count, a) for a in b.images}
    timings.update(accel=b.accels[first.arch] if len(set(b.accels.values())) == 1 else b.accels,
                   smp=b.smps[first.arch] if len(set(b.smps.values())) == 1 else b.smps,
                   count=count, memory_mb=b.memory_mb)
    if len(b.images) > 1 or first.arch != DEFAULT_ARCH:
        timings["arches"] = list(b.arches)
    log.info("booting %d guest(s) (%s): accel=%s smp=%s memory=%d MiB", count, ",".join(b.arches),
             timings["accel"], timings["smp"], b.memory_mb)


def _create_guests(b: _Bringup, lan: Lan | None, lan_first: int) -> list[Guest]:
    """One guest per arch entry (spark-1, spark-2, ...), each on a fresh qcow2 overlay of its arch's image, on the
    shared guest network `lan` from host number `lan_first` on."""
    guests: list[Guest] = []
    for i, a in enumerate(b.arches, start=1):
        name = f"spark-{i}"
        overlay = b.workdir / f"{name}.qcow2"
        with contextlib.suppress(FileNotFoundError):
            overlay.unlink()
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", b.images[a].disk, "-F", "raw",
             overlay], capture_output=True)
        g = Guest(name=name, port=0, overlay=overlay, pidfile=b.workdir / f"{name}.pid",
                  console_log=b.workdir / f"{name}.console.log", key_path=b.images[a].key, argv=[], arch=a,
                  lan=lan, lan_host=lan_first + i - 1)
        with contextlib.suppress(FileNotFoundError):
            g.console_log.unlink()
        guests.append(g)
    return guests


def _boot(b: _Bringup) -> None:
    """Start every guest, wait for all of them, give a mixed fleet one key; on any failure (or SIGTERM as
    SystemExit) tear the fleet down and re-raise."""
    t_boot = time.monotonic()
    per_guest: dict[str, float] = {}
    used: set[int] = set()
    try:
        for g in b.guests:
            _start_on_a_free_port(b, g, used)
            used.add(g.port)
            b.save()
        states = _wait_all(b.guests, seconds=per_guest)
        if len({g.key_path for g in b.guests}) > 1:
            _unify_keys(b.guests, b.key)
    except BaseException:
        log.error("bringing up the fleet failed; tearing down (console logs kept in %s)", b.workdir)
        with contextlib.suppress(Exception):
            down(b.workdir)
        raise
    b.timings["boot_s"] = round(time.monotonic() - t_boot, 1)
    b.timings["boot_s_per_guest"] = {n: round(v, 1) for n, v in per_guest.items()}
    b.timings["states"] = states


def _start_on_a_free_port(b: _Bringup, g: Guest, used: set[int]) -> None:
    img = b.images[g.arch]
    for attempt in range(5):  # a port may be grabbed between probe and bind
        g.port = free_port(avoid=used)
        g.argv = qemu_argv(g, img.kernel, img.initrd, b.memory_mb, b.smps[g.arch], b.accels[g.arch],
                           hostname=g.name)
        try:
            g.start()
            return
        except VMError as e:
            port_clash = "hostfwd" in str(e) or "forwarding" in str(e)
            if not port_clash or attempt == 4:
                raise


def _unify_keys(guests: Sequence[Guest], key: Path) -> None:
    """A mixed fleet: authorize the fleet key (the first image's) for the operator on the guests of the
    other images, and switch them to it, so that the inventory has a single ssh_key."""
    pub = Path(str(key) + ".pub").read_bytes()
    for g in guests:
        if g.key_path != key:
            g.ssh(f"cat >> ~{OPERATOR}/.ssh/authorized_keys", user=OPERATOR, input=pub)
            g.key_path = key
            g.ssh("true", user=OPERATOR)


def _wait_all(guests: Sequence[Guest], seconds: dict | None = None) -> dict[str, str]:
    results: dict[str, str] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def one(g: Guest) -> None:
        t0 = time.monotonic()
        try:
            state = g.wait_ready()
            with lock:
                results[g.name] = state
                if seconds is not None:
                    seconds[g.name] = time.monotonic() - t0
            log.info("%s (%s) ready (%s) after %.0f s", g.name, g.arch, state, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - collected and re-raised below
            with lock:
                errors.append(str(e))

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in guests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise VMError("\n\n".join(errors))
    return results


def down(workdir=None) -> None:
    """Stop the QEMU processes this fleet started and remove its runtime files.
    Console logs are kept. Safe to run twice and when nothing is up."""
    workdir = resolve(workdir, default_workdir)
    if not workdir.is_dir():
        return
    entries: dict[Path, Path] = {}  # pidfile -> overlay
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError):
        for g in json.loads(fleet_json(workdir).read_text())["guests"]:
            entries[Path(g["pidfile"])] = Path(g["overlay"])
    for pf in workdir.glob("*.pid"):  # e.g. fleet.json lost: our naming convention
        entries.setdefault(pf, pf.with_suffix(".qcow2"))
    for pidfile, overlay in entries.items():
        pid = read_pid(pidfile)
        if pid is not None:
            if stop_qemu(pid, overlay):
                log.info("stopped QEMU pid %d (%s)", pid, overlay.name)
            elif Path(f"/proc/{pid}").exists():
                log.debug("pid %d is not our QEMU for %s; left alone", pid, overlay)
        for p in (pidfile, overlay):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    for name in ("fleet.json", "fleet.json.tmp", "inventory.yml", "inventory.yml.tmp"):
        with contextlib.suppress(FileNotFoundError):
            (workdir / name).unlink()
