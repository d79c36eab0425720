"""Read a fleet file in Ansible's YAML inventory format.

    all:
      vars: {...}                 # lowest precedence
      hosts: {spark-01: {...}}    # host vars: highest precedence
      children:
        lab:                      # a group; its vars beat all's, a child group's beat its parent's
          vars: {...}
          hosts: {spark-02: }
          children: {...}

Variable precedence follows Ansible: all < groups by depth (parent before child; same depth by name)
< host. Values replace, except `extra_llm_api_options`, which is deep-merged level by level (a group
can set one TRT-LLM option and a host another). Errors are one line: `file: where: what is wrong`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..serving.options import deep_merge

DEEP_MERGED_VARS = ("extra_llm_api_options",)
GROUP_KEYS = ("hosts", "children", "vars")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


class InventoryError(Exception):
    """A malformed inventory file: the message is one line naming the file and the place."""


@dataclass
class Inventory:
    path: Path
    hosts: list[str] = field(default_factory=list)  # in file order (rollouts rely on it)
    groups: dict[str, list[str]] = field(default_factory=dict)  # group -> hosts (all ancestors included)
    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)  # merged, Ansible precedence
    # per host: the vars set above the `all` level (by a group other than all, or for the host itself); what a
    # fleet-derived default (e.g. hub_endpoint -> the hub_mirror group's mirror) must not override
    explicit: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class _Group:
    name: str
    depth: int
    vars: dict[str, Any]
    hosts: dict[str, dict[str, Any]]
    children: list[str]


def load_inventory(path: str | Path) -> Inventory:
    path = Path(path)
    reader = _Reader(str(path))
    reader.walk("all", _with_top_level_groups(str(path), _read_yaml(path)), 0, ("all",))
    if not reader.order:
        raise InventoryError(f"{path}: no hosts defined (add hosts under all.hosts or a group's hosts)")
    return reader.inventory(path)


def _read_yaml(path: Path) -> dict:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError(f"{where}: cannot read inventory: {exc.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InventoryError(f"{where}: {line}not valid YAML: {problem}") from None
    if not isinstance(doc, dict) or not doc:
        raise InventoryError(f"{where}: top level must be a mapping of groups, "
                             "e.g. `all:` with `hosts:`/`children:`/`vars:`")
    return doc


def _with_top_level_groups(where: str, doc: dict) -> dict:
    """`all`'s definition, with the other top-level groups as its children (implicit, as in Ansible)."""
    top = dict(doc)
    all_def = top.pop("all", None) or {}
    if not isinstance(all_def, dict):
        raise InventoryError(f"{where}: all: must be a mapping with hosts/children/vars")
    all_def = dict(all_def)
    children = (dict(all_def.get("children") or {}) if isinstance(all_def.get("children") or {}, dict)
                else all_def.get("children"))
    if top:
        if not isinstance(children, dict):
            raise InventoryError(f"{where}: all.children: must be a mapping of group names")
        children.update(top)
    all_def["children"] = children
    return all_def


class _Reader:
    """Walks the group tree once, collecting groups, each host's groups and the hosts in file order."""

    def __init__(self, where: str):
        self.where = where
        self.groups: dict[str, _Group] = {}
        self.host_groups: dict[str, list[str]] = {}
        self.order: list[str] = []

    def walk(self, name: str, definition: Any, depth: int, trail: tuple[str, ...]) -> None:
        loc = ".".join(trail)
        if name in trail[:-1]:
            raise InventoryError(f"{self.where}: {loc}: group '{name}' contains itself")
        gvars, hosts, kids = self._parts(loc, {} if definition is None else definition)
        group = self.groups.get(name)
        if group is None:
            group = self.groups[name] = _Group(name, depth, {}, {}, [])
        group.depth = max(group.depth, depth)
        group.vars.update(gvars)
        self._add_hosts(group, loc, hosts)
        for child, cdef in kids.items():
            cname = str(child)
            if not NAME_RE.match(cname):
                raise InventoryError(f"{self.where}: {loc}.children: invalid group name '{cname}'")
            if cname == "all":
                raise InventoryError(f"{self.where}: {loc}.children: 'all' cannot be a child group")
            if cname not in group.children:
                group.children.append(cname)
            self.walk(cname, cdef, depth + 1, trail + ("children", cname))

    def _parts(self, loc: str, definition: Any) -> tuple[dict, dict, dict]:
        where = self.where
        if not isinstance(definition, dict):
            raise InventoryError(f"{where}: {loc}: a group must be a mapping with hosts/children/vars, "
                                 f"got {type(definition).__name__}")
        unknown = sorted(set(definition) - set(GROUP_KEYS))
        if unknown:
            raise InventoryError(f"{where}: {loc}: unknown key '{unknown[0]}' (a group has only hosts, children, vars)")
        gvars = definition.get("vars") or {}
        if not isinstance(gvars, dict) or not all(isinstance(k, str) for k in gvars):
            raise InventoryError(f"{where}: {loc}.vars: must be a mapping of variable names to values")
        hosts = definition.get("hosts") or {}
        if not isinstance(hosts, dict):
            raise InventoryError(f"{where}: {loc}.hosts: must be a mapping of host names (each with its vars or empty)")
        kids = definition.get("children") or {}
        if not isinstance(kids, dict):
            raise InventoryError(f"{where}: {loc}.children: must be a mapping of group names")
        return gvars, hosts, kids

    def _add_hosts(self, group: _Group, loc: str, hosts: dict) -> None:
        for host, hvars in hosts.items():
            hname = str(host)
            if not NAME_RE.match(hname):
                raise InventoryError(f"{self.where}: {loc}.hosts: invalid host name '{hname}'")
            if hvars is None:
                hvars = {}
            if not isinstance(hvars, dict) or not all(isinstance(k, str) for k in hvars):
                raise InventoryError(f"{self.where}: {loc}.hosts.{hname}: host vars must be a mapping (or empty)")
            group.hosts.setdefault(hname, {}).update(hvars)
            if hname not in self.host_groups:
                self.host_groups[hname] = []
                self.order.append(hname)
            if group.name not in self.host_groups[hname]:
                self.host_groups[hname].append(group.name)

    def _membership(self) -> dict[str, set[str]]:
        """Every host belongs to each ancestor group of the groups that list it (and to all)."""
        parents: dict[str, set[str]] = {g: set() for g in self.groups}
        for g in self.groups.values():
            for c in g.children:
                parents[c].add(g.name)

        def ancestors(g: str, seen: set[str]) -> set[str]:
            for parent in parents[g]:
                if parent not in seen:
                    seen.add(parent)
                    ancestors(parent, seen)
            return seen

        membership: dict[str, set[str]] = {}
        for host in self.order:
            member = set(self.host_groups[host])
            for group in list(member):
                member |= ancestors(group, set())
            member.add("all")
            membership[host] = member
        return membership

    def inventory(self, path: Path) -> Inventory:
        groups, membership = self.groups, self._membership()
        inv = Inventory(path=path, hosts=self.order)
        for gname in groups:
            inv.groups[gname] = [h for h in self.order if gname in membership[h]]
        for host in self.order:
            levels = sorted(membership[host], key=lambda n: (groups[n].depth, n))
            merged: dict[str, Any] = {}
            for g in levels:
                merged = _merge_vars(merged, groups[g].vars)
            for g in levels:
                if host in groups[g].hosts:
                    merged = _merge_vars(merged, groups[g].hosts[host])
            inv.host_vars[host] = merged
            inv.explicit[host] = {k for g in membership[host] if g != "all" for k in groups[g].vars} | \
                {k for g in membership[host] if host in groups[g].hosts for k in groups[g].hosts[host]}
        return inv


def _merge_vars(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if key in DEEP_MERGED_VARS and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
