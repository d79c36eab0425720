"""The current host's state, as the steps see it: its plan, its one status read (host_status), what must be on it
(wanted_files) and whether a path differs, the model files it lacks, and an operation that refuses."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import Host, operation
from pyinfra.context import ctx_state

from ...gateway import status as gateway
from ...memory import status as memory_status
from ...mirror import status as mirror
from ...pair import status as pair_status
from ...plan import HostPlan
from ...serving import status as release_status
from ...serving.status import model_paths
from ...serving.validate import config_key, image_key
from ..grammars import pinned_version
from ..status import HostStatus, SpecfleetHost, Want, parts, status_env
from .coordination import Slot

# What a Spark's one status read is made of: each feature's part, registered by its module (facts.register).
SPARK_PARTS = (release_status.PLATFORM, release_status.RELEASE, memory_status.MEMORY, pair_status.PAIR, gateway.SPARK,
               mirror.SPARK)


def current_plan() -> HostPlan:
    plan = host.data.get("specfleet")
    if not isinstance(plan, HostPlan):
        raise SystemExit(f"specfleet: {host.name}: no specfleet plan in host data; run with specfleet's inventory.py "
                         "(pyinfra inventory.py deploys/<name>.py)")
    return plan


STATUS_READS: Slot[dict[str, HostStatus]] = Slot("status reads", dict)  # host name -> its status before the run


def host_status(plan: HostPlan, on: Host | None = None) -> HostStatus:
    """The host's status before this run changed anything (read once per host per run). `on`: another host of
    this run whose plan `plan` is (a pair's head and worker each read the other's, through its own connection)."""
    target = on or host
    per_run = STATUS_READS()
    if target.name not in per_run:
        per_run[target.name] = _read_status(plan, target)
    return per_run[target.name]


def pair_peer(plan: HostPlan) -> tuple[HostPlan, Host] | None:
    """A pair host's other host in this run, with its plan (None: not in this run, e.g. left out by --limit)."""
    state = ctx_state.get()
    for other in state.activated_hosts:
        theirs = other.data.get("specfleet")
        if isinstance(theirs, HostPlan) and theirs.settings.host == plan.settings.pair_peer:
            return theirs, other
    return None


def wanted_files(plan: HostPlan) -> dict[str, Want]:
    """Every small file/dir/link a converge manages, with what it must be (one status read covers all)."""
    return plan.derived("wanted_files", _wanted_files)


def _wanted_files(plan: HostPlan) -> dict[str, Want]:
    """Each part's wanted files, in the parts' order (facts.parts)."""
    return {path: want for part in parts() for path, want in part.wanted(plan).items()}


def _read_status(plan: HostPlan, on: Host) -> HostStatus:
    return on.get_fact(SpecfleetHost, env=status_env(plan, wanted_files(plan)))


def needs_validation(plan: HostPlan) -> bool:
    """Whether the release step must validate the config in the image (validate_in_image): no cached OK verdict for
    (config hash, image id) in the one status read. An image still to pull has no id yet: validated after the pull.
    An engine whose options are not checked in its image (engines/catalog.py) never needs it."""
    s, st = plan.settings, host_status(plan).release
    if s.profile is None or not s.engine.validates_in_image:
        return False
    return not st.image_id or f"{config_key(plan.rendered.config)}-{image_key(st.image_id)}" not in st.validated


def differs(plan: HostPlan, path: str) -> bool:
    """Whether `path` is not yet what the converge wants (decided from the one status read)."""
    return not wanted_files(plan)[path].matches(host_status(plan).files.found.get(path))


def missing(plan: HostPlan, status: HostStatus, role: str) -> list[tuple[str, int]]:
    return [(path, size) for path, size in model_paths(plan)[role] if status.files.sizes.get(path, -1) != size]


@operation(is_idempotent=False)
def refuse(message: str):
    """Fail this host with one line (used by read-only checks; nothing has changed on the host)."""
    yield f"echo {shlex.quote(message)} >&2; exit 1"


def hub_client_ok(plan: HostPlan) -> bool:
    """Whether the fetch virtualenv already holds exactly the pinned huggingface_hub."""
    pinned = pinned_version(plan.settings.hub_client_requirement, "huggingface_hub")
    return pinned is not None and host_status(plan).release.hub_client == pinned
