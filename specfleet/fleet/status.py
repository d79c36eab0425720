"""One read-only fact with everything the converge decides on, gathered in a single remote command (one SSH round trip
per host: re-runs stay fast), composed of the parts the features register.

A part (StatusPart) is one feature's share of the read: its fragment of the shell program, the environment that
fragment reads, its typed parser of the lines the fragment prints (`key<TAB>value`, under keys no other part prints),
what it asks the shared file checks about, and the files the converge manages for it. The read (HostStatus) holds
each part's parsed value under the part's name: `status.release.current`, `status.memory.mem_total`, ... The shared
file checks are the part this module owns (`status.files`): one python3 that reports what every part asked about.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pyinfra.api import FactBase

from ..fleet.programs import program_text
from ..host.layout import Layout
from ..plan import HostPlan

FILE_STATUS = program_text("file_status.py")

T = TypeVar("T")
Lines = list[tuple[str, str]]  # a part's lines, in the order printed: (key, the rest of the line after its tab)


@dataclass(frozen=True)
class FileReads:
    """What a part asks the shared file checks (host/probes/file_status.py) about, each a tuple of paths or users."""

    sizes: tuple[str, ...] = ()  # size (links followed; -1 missing)
    files: tuple[str, ...] = ()  # kind, mode, owner and content hash (or a link's target)
    users: tuple[str, ...] = ()  # groups, primary first (or that the user is missing)
    keys: tuple[str, ...] = ()  # a public key file's first line
    stats: tuple[str, ...] = ()  # kind, mode, owner and size, never opened (a private key)


@dataclass(frozen=True)
class Want:
    """What a managed path must be: a dir/file with mode and owner (and content), or a symlink."""

    kind: str  # "dir" | "file" | "link"
    mode: str = "755"
    user: str = "root"
    group: str = "root"
    sha256: str | None = None  # files: expected content hash (None: only existence, mode, owner)
    target: str | None = None  # links

    def matches(self, found: tuple[str, ...] | None) -> bool:
        if not found or found[0] != self.kind:
            return False
        if self.kind == "link":
            return found[1] == self.target
        if tuple(found[1:4]) != (self.mode, self.user, self.group):
            return False
        if self.sha256 is None:
            # content not known in advance (release.json records its creation time): it must at least not be
            # empty, as a file is after a power loss right after it was written
            return self.kind != "file" or (len(found) > 4 and found[4] != EMPTY_SHA256)
        return found[4] == self.sha256


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def sha256(content: bytes | str) -> str:
    return hashlib.sha256(content.encode() if isinstance(content, str) else content).hexdigest()


def _no_env(plan: HostPlan) -> Mapping[str, str]:
    return {}


def _no_reads(plan: HostPlan) -> FileReads:
    return FileReads()


def _no_wanted(plan: HostPlan) -> Mapping[str, Want]:
    return {}


@dataclass(frozen=True)
class StatusPart(Generic[T]):
    """A feature's share of the one status read. Every hook is optional: a part may only ask the file checks."""

    name: str  # the attribute of HostStatus that holds the parsed value (and the order of the fragments)
    keys: frozenset[str] = frozenset()  # the line keys its fragment prints
    parse: Callable[[Lines], T] | None = None  # its lines -> its value; no lines: what a host that said nothing reads
    script: str = ""  # its fragment of the one remote command (sh): reads DATA, SVC and its own `env`, prints lines
    env: Callable[[HostPlan], Mapping[str, str]] = _no_env  # the variables its fragment reads
    reads: Callable[[HostPlan], FileReads] = _no_reads  # what it asks the shared file checks about
    wanted: Callable[[HostPlan], Mapping[str, Want]] = _no_wanted  # the files the converge manages for it


_PARTS: dict[str, StatusPart[Any]] = {}


def register(part: StatusPart[T]) -> StatusPart[T]:
    """Add a part to the one status read (a feature's module does, once). Its name and keys must be its own."""
    taken = {key for other in _PARTS.values() for key in other.keys}
    if part.name in _PARTS or part.name in _RESERVED or part.keys & taken:
        raise ValueError(f"status part {part.name!r}: its name or one of its keys {sorted(part.keys)} is taken")
    _PARTS[part.name] = part
    return part


def unregister(part: StatusPart[Any]) -> None:
    _PARTS.pop(part.name, None)


def parts() -> list[StatusPart[Any]]:
    """The registered parts, by name: the order of the fragments, of the variables and of the wanted files."""
    return [_PARTS[name] for name in sorted(_PARTS)]


class HostStatus:
    """The one status read of a Spark: each part's parsed value, as the attribute named after the part."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = dict(values)

    @classmethod
    def parse(cls, output: Iterable[str]) -> HostStatus:
        """The read from the probe's lines: each line to the part that prints its key (lines of no part: ignored)."""
        owners = {key: part for part in parts() for key in part.keys}
        lines: dict[str, Lines] = {part.name: [] for part in parts()}
        for line in output:
            key, _, rest = line.partition("\t")
            if key in owners:
                lines[owners[key].name].append((key, rest))
        return cls({part.name: part.parse(lines[part.name]) for part in parts() if part.parse is not None})

    def part(self, part: StatusPart[T]) -> T:
        """One part's value, typed."""
        value: T = self._values[part.name]
        return value

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(f"the status read has no part {name!r}") from None

    def __repr__(self) -> str:
        return f"HostStatus({self._values!r})"


# ---- the shared file checks: one python3 reports what every part asked about ----

@dataclass
class FileChecks:
    sizes: dict[str, int] = field(default_factory=dict)  # path -> size (-1 missing)
    # path -> ("dir"|"file", mode, user, group[, sha256]) or ("link", target): the FILES found
    found: dict[str, tuple[str, ...]] = field(default_factory=dict)
    groups: dict[str, list[str] | None] = field(default_factory=dict)  # user -> groups (None: no such user)
    stats: dict[str, tuple[str, ...]] = field(default_factory=dict)  # path -> (kind, mode, user, group, size)
    pubkeys: dict[str, str] = field(default_factory=dict)  # public key file -> its first line


def parse_file_checks(lines: Lines) -> FileChecks:
    out = FileChecks()
    for key, rest in lines:
        first, _, second = rest.partition("\t")
        if key == "size":
            out.sizes[second] = int(first) if first.lstrip("-").isdigit() else -1
        elif key in ("file", "stat"):
            (out.found if key == "file" else out.stats)[second] = tuple(first.split("|"))
        elif key == "groups":
            out.groups[first] = None if second == "(missing)" else second.split()
        elif key == "pubkey":
            out.pubkeys[first] = second
    return out


_FILE_VARS = {"SIZES": "sizes", "FILES": "files", "USERS": "users", "KEYS": "keys", "STATS": "stats"}
# -I -S: stdlib only, quicker to start; one process for every path, not a few programs per path
FILES = StatusPart("files", frozenset({"size", "file", "groups", "stat", "pubkey"}), parse_file_checks,
                   script='command -v python3 >/dev/null 2>&1 && python3 -I -S -c "$FILE_STATUS"\n')
_RESERVED = {"files"}  # the file checks' own part, added below: no feature registers it
_PARTS[FILES.name] = FILES


def file_env(asked: Iterable[FileReads], wanted: Iterable[str]) -> dict[str, str]:
    """The file checks' variables: every part's reads, one path per line (Hub file names may hold spaces; the
    controller refuses control characters); the wanted files come first, then what parts read besides."""
    merged: dict[str, dict[str, None]] = {attr: {} for attr in _FILE_VARS.values()}
    merged["files"].update(dict.fromkeys(wanted))
    for reads in asked:
        for attr, paths in merged.items():
            paths.update(dict.fromkeys(getattr(reads, attr)))
    return {"FILE_STATUS": FILE_STATUS, **{var: "\n".join(merged[attr]) for var, attr in _FILE_VARS.items()}}


def status_env(plan: HostPlan, wanted: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """The environment of the one status read of `plan`'s host: DATA and SVC, which any fragment may read, then
    each part's variables (a variable belongs to one part), then the file checks' (`wanted`: the managed paths)."""
    s = plan.settings
    env = {"DATA": s.data_dir, "SVC": s.serving_unit}
    for part in parts():
        for var, value in part.env(plan).items():
            if var in env or var in _FILE_VARS or var == "FILE_STATUS":
                raise ValueError(f"status part {part.name!r}: the variable {var} is taken")
            env[var] = value
    env.update(file_env([part.reads(plan) for part in parts()], wanted))
    return tuple(env.items())


class SpecfleetHost(FactBase):
    """Status of a specfleet host: every registered part's fragment, in one remote command (`env`: status_env)."""

    @staticmethod
    def default() -> HostStatus:
        return HostStatus.parse([])

    def command(self, env: tuple[tuple[str, str], ...]) -> str:
        assigns = " ".join(f"{k}={shlex.quote(v)}" for k, v in env)
        script = "".join(part.script for part in parts())
        return f"{assigns}; export {' '.join(k for k, _ in env)}; {script}true"

    def process(self, output) -> HostStatus:
        return HostStatus.parse(output)


class ReleaseStatus(FactBase):
    """`specfleet-host status` as JSON: current/previous release, releases, unit state, gate, job ({} if absent)."""

    def command(self, data_dir):
        return f"{shlex.join(Layout(data_dir).host_tool_argv('status'))} 2>/dev/null || echo '{{}}'"

    def process(self, output):
        try:
            return json.loads("\n".join(output))
        except ValueError:
            return {}
