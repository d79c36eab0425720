"""What a converge would change on a host, decided from the one status read the steps decide from.

`pending` decides whether a converge takes the host's run lock; `specfleet plan` prints `changes`; the mirror's
warm-up asks which hosts still fetch models."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...gateway.render import spark_paths
from ...memory.steps import dockerd_note, dockerd_work, earlyoom_work
from ...mirror.steps.images import pull_of
from ...pair.steps.link import link_work
from ...pair.steps.trust import trust
from ...plan import HostPlan
from ...serving.steps.service import RESTARTS, switch_checks
from .state import differs, host_status, hub_client_ok, missing, needs_validation, wanted_files


@dataclass
class Fetch:
    role: str
    repo: str
    commit: str
    files: int  # files to download into the snapshot
    bytes: int
    links: int  # draft hard links to (re)make (no download)

    def line(self) -> str:
        """THE one-line description of a fetch (the converge's pending list and `specfleet plan` print it)."""
        return (f"fetch {self.role} {self.repo}@{self.commit[:12]}: {self.files} file(s), {self.bytes:,} bytes"
                + (f", {self.links} draft link(s)" if self.links else ""))


@dataclass
class Changes:
    """What a converge would do on the host, decided from the one status read (the steps decide the same way)."""

    current: str
    release: str | None  # the plan's release (None: profile-less deploy)
    switch: list[tuple[str, str]]  # (kind, why) from service.switch_checks
    fetches: list[Fetch]
    pull: str | None  # how the image arrives (mirror/steps/images.py: Pull.line()); None: it is on the host
    token: str | None  # "write" / "remove"
    users: list[str]  # added to the docker group
    install: str | None  # hub client requirement to install
    writes: list[str]  # other managed files/dirs/links (tools, encodings, release files) to write
    removes: list[str] = field(default_factory=list)  # left by a gateway group the fleet no longer has
    validate: str | None = None  # image whose own TensorRT-LLM validates the config (no cached verdict)
    pair: list[str] = field(default_factory=list)  # a pair host's link and MPI trust (steps/pair_link, steps/pair)
    memory: str | None = None  # what the profile needs of the host's memory (memory.Fit.line): shown, not a change
    dockerd: str | None = None  # the running dockerd's OOM score to set (memory/steps.py)
    earlyoom: list[str] = field(default_factory=list)  # earlyoom to install, start or restart (memory/steps.py)
    notes: list[str] = field(default_factory=list)  # what the converge leaves as it is, and why: shown, not a change

    @property
    def restart(self) -> list[str]:
        return [why for kind, why in self.switch if kind in RESTARTS]

    @property
    def unit_rewrite(self) -> bool:
        return any(kind == "unit" for kind, _ in self.switch)

    def lines(self) -> list[str]:
        out = [f"write {path}" for path in self.writes] + self.pair
        out += [f"remove {path} (the fleet has no gateway group)" for path in self.removes]
        if self.token:
            out.append(f"{self.token} the Hugging Face token file")
        out += [f"add {u} to the docker group" for u in self.users]
        if self.dockerd:
            out.append(self.dockerd)
        out += self.earlyoom
        if self.validate:
            out.append(f"validate the options with {self.validate} (no cached verdict)")
        if self.install:
            out.append(f"install {self.install}")
        if self.pull:
            out.append(self.pull)
        out += [f.line() for f in self.fetches]
        out += [why for _, why in self.switch]
        return out


def changes(plan: HostPlan) -> Changes:
    s, st, layout = plan.settings, host_status(plan), plan.paths
    token = None
    if s.hf_token is None and layout.token_file in st.files.found:
        token = "remove"
    elif s.hf_token is not None and differs(plan, layout.token_file):
        token = "write"
    writes = [path for path in wanted_files(plan) if path != layout.token_file and differs(plan, path)]
    users = [u for u in s.operator_users if st.files.groups.get(u) and "docker" not in st.files.groups[u]]
    fetches: list[Fetch] = []
    switch: list[tuple[str, str]] = []
    pull = None
    if s.profile is not None:
        how = pull_of(plan, st)
        pull = None if how.kind == "none" else how.line()
        for role, pin in plan.pins.items():
            todo = missing(plan, st, role)
            if todo:
                snap = [(path, size) for path, size in todo if "/snapshots/" in path]
                fetches.append(Fetch(role, pin.repo, pin.commit, len(snap), sum(size for _, size in snap),
                                     len(todo) - len(snap)))
        switch = switch_checks(plan)
    mem = st.memory
    return Changes(current=st.release.current, release=plan.release_id if s.profile is not None else None,
                   switch=switch,
                   fetches=fetches, pull=pull, token=token, users=users,
                   install=None if hub_client_ok(plan) else s.hub_client_requirement, writes=writes,
                   removes=[path for path in spark_paths(s) if path in st.files.found] if not s.gateways else [],
                   validate=f"{s.image}'s own {s.engine.checked_by}" if needs_validation(plan) else None,
                   pair=_pair_lines(plan), dockerd=dockerd_work(plan), earlyoom=earlyoom_work(plan),
                   notes=[n for n in (dockerd_note(plan),) if n],
                   memory=plan.memory_fit.plan_line(mem.mem_total, mem.mem_available) if plan.memory_fit else None)


def _pair_lines(plan: HostPlan) -> list[str]:
    link, mpi = link_work(plan), trust(plan)
    return (link.lines(plan) if link else []) + (mpi.lines(plan) if mpi else [])


def pending(plan: HostPlan) -> list[str]:
    """What a converge would change on the host, from the one status read (empty: nothing to do).

    Decides whether a converge takes the host's run lock; `specfleet plan` prints it (via `changes`)."""
    return changes(plan).lines()
