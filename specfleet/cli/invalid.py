"""Invalid input: the checks several commands make of their arguments, and the one way a command refuses it (one
line per problem on stderr, exit 2; nothing was touched)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from ..constants import EXIT_INVALID
from ..fleet.inventory import Inventory
from ..fleet.profiles import ProfileError
from ..fleet.project import use_project
from ..plan import HostPlan, PlanError, build_plans, deploy_profile, fleet_plans, load_inventory_or_fail, role_problems


def exit_invalid(lines: list[str]) -> NoReturn:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(EXIT_INVALID)


@contextmanager
def invalid_input(*also: type[Exception]) -> Iterator[None]:
    """A PlanError raised inside (or one of `also`, its message as the line) exits 2 with its lines."""
    caught: tuple[type[Exception], ...] = (PlanError, ProfileError, *also)
    try:
        yield
    except caught as exc:
        exit_invalid(getattr(exc, "lines", [str(exc)]))


def use_inventory_py(inventory_file: str) -> None:
    """Make the directory of `inventory_file`, specfleet's inventory.py, this run's project (PlanError if it is not)."""
    if Path(inventory_file).name != "inventory.py":
        raise PlanError([f"{inventory_file}: expected specfleet's inventory.py (the fleet file itself is named by "
                         "SPECFLEET_INVENTORY)"])
    use_project(inventory_file)


def fleet_plans_or_exit(inventory_file: str) -> tuple[Inventory, dict[str, HostPlan]]:
    """plan.fleet_plans for a command: the project of `inventory_file`, its fleet and one plan per host."""
    with invalid_input():
        return fleet_plans(inventory_file)


def deploy_plans(inventory_file: str, deploy_file: str, hub: bool) -> tuple[Inventory, dict[str, HostPlan]]:
    """The plans `check` and `render` read: the project of `inventory_file`, every host validated for DEPLOY_FILE (its
    profile), pinned from the lock (or, with `hub`, the Hub), and what the deploy's role needs on the controller."""
    use_inventory_py(inventory_file)  # its directory is the project (fleet file default, group_data/all.py)
    inventory = load_inventory_or_fail()
    plans = build_plans(inventory, deploy_profile(deploy_file), live=hub)
    problems = role_problems(plans, [deploy_file])
    if problems:
        raise PlanError(problems)
    return inventory, plans
