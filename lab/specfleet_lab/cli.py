"""The `specfleet-lab` command (click only): up, down, build-image, status. SIGTERM (CI cancelling) becomes
SystemExit only while a command runs, so that partial image builds and half-started fleets are cleaned up."""

from __future__ import annotations

import contextlib
import logging
import signal
from pathlib import Path

import click

from .arch import DEFAULT_ARCH, guest_arches, parse_arches
from .drivers import DEFAULT, REGISTRY, choose
from .errors import VMError
from .fleet import down, down_all, up
from .host import OPERATOR
from .image import build_image
from .state import load


def _setup_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s vm: %(message)s",
                            datefmt="%H:%M:%S")


@contextlib.contextmanager
def exit_on_sigterm():
    """CI cancels with SIGTERM: inside this block it is SystemExit, so `finally` blocks run (partial image builds
    are removed, a half-started fleet is torn down). The previous handler comes back afterwards: a command invoked
    in-process (click's CliRunner in a test run) must not leave its handler behind in the caller's process."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_workdir_opt = click.option(
    "--workdir", type=click.Path(file_okay=False, path_type=Path), envvar="SPECFLEET_VM_DIR",
    default=".vm", show_default=True, help="Where overlays, logs, fleet.json and "
    "inventory.yml live (env SPECFLEET_VM_DIR).")
_cache_opt = click.option(
    "--cache-dir", type=click.Path(file_okay=False, path_type=Path),
    envvar="SPECFLEET_CACHE_DIR", default="~/.cache/specfleet", show_default=True,
    help="Image cache (env SPECFLEET_CACHE_DIR).")

main = click.Group("specfleet-lab", help="A fleet of hosts standing in for DGX Sparks (containers, or QEMU guests).")


def _arch_option(ctx, param, value):
    """--arch: one architecture, or a comma-separated list (one per guest); bad input is one line."""
    if value is None:
        return None
    try:
        return parse_arches(value)
    except VMError as e:
        raise click.BadParameter(str(e)) from None


@main.command("up")
@click.option("--count", type=click.IntRange(1, 16), default=None,
              help="Number of hosts [default: 3, or one per --arch entry].")
@click.option("--arch", "arch", default=None, callback=_arch_option, metavar="ARCH[,ARCH...]",
              help="Host architecture: x86_64 (default) or arm64 (a QEMU guest, TCG-emulated, "
                   "qemu-system-aarch64 -M virt); a comma-separated list gives one architecture per host, e.g. "
                   "x86_64,arm64.")
@_workdir_opt
@click.option("--memory", "memory_mb", type=click.IntRange(256), default=2048,
              show_default=True, help="Memory per host in MiB (a container's limit, or a guest's RAM).")
@_cache_opt
@click.option("--smp", type=click.IntRange(1, 64), default=None,
              help="vCPUs per QEMU guest (default: chosen from the machine's cores and --count).")
@click.option("--lan", is_flag=True, help="Also put the hosts on a shared network of their own (a second NIC, eth1, "
                                          "static .11, .12, ...; the inventory's fleet_address).")
@click.option("--driver", type=click.Choice(sorted(REGISTRY)), envvar="SPECFLEET_LAB_DRIVER", default=None,
              help=f"What runs the hosts [default: {DEFAULT}, or qemu with one line saying why where containers "
                   "cannot run; env SPECFLEET_LAB_DRIVER]. arm64 hosts are always QEMU guests.")
@click.option("--pair-link", is_flag=True, help="Join the first two hosts by a stand-in ConnectX-7 link of their own "
                                                "(two more NICs each, named enp1s0f1np1 and enP2p1s0f1np1).")
def up_cmd(count: int | None, arch: list | None, workdir: Path, memory_mb: int, cache_dir: Path,
           smp: int | None, lan: bool, pair_link: bool, driver: str | None) -> None:
    """Start COUNT hosts and write WORKDIR/inventory.yml."""
    _setup_logging()
    try:
        arches = guest_arches(count, arch)
    except VMError as e:
        raise click.UsageError(str(e)) from None
    try:
        with exit_on_sigterm():
            drv = choose(driver, arches=arches, workdir=workdir, say=lambda line: click.echo(line, err=True))
            fleet = up(count=len(arches), workdir=workdir, cache_dir=Path(cache_dir).expanduser(),
                       memory_mb=memory_mb, smp=smp, arch=arches, lan=lan, pair_link=pair_link, driver=drv)
    except VMError as e:
        raise click.ClickException(str(e)) from None
    for g in fleet.guests:
        click.echo(f"{g.name}\t{g.ssh_host}:{g.ssh_port}\t{g.arch}" + (f"\t{g.lan_address}" if g.lan_address else ""))
    click.echo(f"inventory: {fleet.inventory_path}")
    click.echo(f"log in:    {fleet.guests[0].login_command()}   (operator {OPERATOR}; sudo -i for root)")


@main.command("down")
@_workdir_opt
@click.option("--all", "everything", is_flag=True,
              help="Every fleet up on this machine, and every container engine of the lab (also what a killed run "
                   "left).")
def down_cmd(workdir: Path, everything: bool) -> None:
    """Stop the fleet's hosts and remove what it made (console logs are kept)."""
    _setup_logging()
    try:
        if everything:
            for done in down_all():
                click.echo(f"down: {done}")
            return
        down(workdir)
    except VMError as e:
        raise click.ClickException(str(e)) from None


@main.command("build-image")
@_cache_opt
@click.option("--arch", "arch", default=None, callback=_arch_option, metavar="ARCH[,ARCH...]",
              help="x86_64 (default) and/or arm64; one image per architecture.")
def build_image_cmd(cache_dir: Path, arch: list | None) -> None:
    """Build (or find cached) the host image(s) (disk and container outputs) and print the directory of each."""
    _setup_logging()
    try:
        with exit_on_sigterm():
            for a in dict.fromkeys(arch or [DEFAULT_ARCH]):
                info = build_image(Path(cache_dir).expanduser(), arch=a)
                click.echo(str(info.dir))
    except VMError as e:
        raise click.ClickException(str(e)) from None


@main.command("status")
@_workdir_opt
def status_cmd(workdir: Path) -> None:
    """Show the fleet's hosts, their driver and whether each is running."""
    try:
        fleet = load(workdir)
    except VMError as e:
        raise click.ClickException(str(e)) from None
    for g in fleet.guests:
        state = "running" if g.is_running() else "stopped"
        click.echo(f"{g.name}\t{g.driver}\t{g.ssh_host}:{g.ssh_port}\t{g.arch}\t{state}")
