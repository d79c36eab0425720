"""specfleet's modules import one way: core <- pyinfra layer <- command line; host programs import only the stdlib.

Every module's imports are read with `ast` (also those inside functions), relative imports resolved. The test fails,
naming file:line, on:
- a specfleet import inside a function (it hides a cycle or a layer breach from the reader and from this test);
- an import against the direction (below);
- an import cycle among specfleet modules (top-level imports).

The layers. A module's layer is read from its dotted name: the first role-named part after `specfleet` decides
(`ROLES`), and a module with no role-named part is core. So `gateway.steps.gateways` is pyinfra, `gateway.host.drain`
is host, `cli.status` is cli, and `gateway.render` is core.
- core: pure; no pyinfra, no click, no gevent. Imports core (and host) only. Role files: rules, render, report, ...
- pyinfra: a feature's `status` (its part of the status read), its `steps`, and its `run` (what drives pyinfra's API
  over hosts). Imports core and pyinfra (and host); no click.
- cli: click commands only (`specfleet/cli/`). Imports anything but the entry point; nothing but the entry point
  imports it.
- host: programs shipped to the hosts and run there (each feature's `host/` folder, and the shared kit in
  `specfleet/host/`): the stdlib only, and their siblings by bare name (installed side by side in one directory, so
  their file names are unique across the package). Anyone may import them (the host layout is also the controller's).
- testinfra: the checks a project's tests/infra collects: core (and host) only.
- entry: the console script (`specfleet/__main__.py`): gevent's monkey-patching, then the cli.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from specfleet.fleet.programs import program_names
from specfleet.host.layout import HOST_PROGRAMS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "specfleet"
EXCLUDED = ("scaffold",)  # specfleet/scaffold/: a project's files that `specfleet init` writes (they import specfleet)

# the role names a module's dotted name may carry, and the layer each gives (the first one after `specfleet` decides)
ROLES = {
    "cli": "cli",  # click commands
    "testinfra": "testinfra",  # the checks a project's tests/infra collects
    "__main__": "entry",  # the console script
    "host": "host",  # programs shipped to and run on hosts
    "steps": "pyinfra",  # pyinfra operations
    "status": "pyinfra",  # a feature's part of the status read (pyinfra facts)
    "run": "pyinfra",  # what drives pyinfra's API over hosts (rollout, bench, status, a deploy run)
}


def layer_of(module: str) -> str:
    """A module's layer, from its dotted name's first role-named part after `specfleet`; core without one."""
    return next((ROLES[part] for part in module.split(".")[1:] if part in ROLES), "core")


# layer -> the specfleet layers it may import
MAY_IMPORT = {
    "host": {"host"},
    "core": {"host", "core"},
    "pyinfra": {"host", "core", "pyinfra"},
    "cli": {"host", "core", "pyinfra", "cli"},
    "testinfra": {"host", "core"},
    "entry": {"cli"},
}
# layer -> third-party top-level packages it must not import
BANNED = {
    "core": {"pyinfra", "pyinfra_cli", "click", "gevent"},  # a pyinfra module is named steps, status or run
    "pyinfra": {"click", "pyinfra_cli"},
    "testinfra": {"pyinfra_cli", "click", "gevent"},
}
# host programs run with another Python than the system's: what else each may import there
HOST_ENVIRONMENT = {
    "specfleet.serving.host.fetch_model": {"huggingface_hub", "httpx2"},  # the fetch virtualenv's pinned huggingface_hub
    "specfleet.serving.host.validate_config": {"yaml"},  # runs in the image, with its own TensorRT-LLM and yaml
}


@dataclass(frozen=True)
class Import:
    path: str  # file, relative to the repository
    line: int
    target: str  # absolute module name (a specfleet module, or a top-level third-party/stdlib name)
    in_function: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(module: str, source: str, path: str, is_package: bool, known: set[str]) -> list[Import]:
    """Every import of a module's source, relative ones resolved; `from pkg import sub` names the submodule."""
    out: list[Import] = []
    package = module if is_package else module.rpartition(".")[0]

    installed = host_modules(known) if layer_of(module) == "host" else {}

    def sibling(name: str) -> str:  # host programs import the modules installed next to them by their bare name
        return installed.get(name, name)

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend(Import(path, child.lineno, sibling(alias.name), inner) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module != "__future__":
                base = sibling(child.module or "")
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    out.append(Import(path, child.lineno, sub if sub in known else base, inner))
            visit(child, inner)

    visit(ast.parse(source, filename=path), False)
    return list(dict.fromkeys(out))  # `from x import a, b`: one import of x


def host_modules(known: set[str]) -> dict[str, str]:
    """Bare name -> module of every host program module: on a host they are installed side by side in one directory."""
    return {m.rpartition(".")[2]: m for m in sorted(known) if layer_of(m) == "host" and m.rpartition(".")[2] != "host"}


def owner(target: str, known: set[str]) -> str | None:
    """The specfleet module an import target names (the longest known prefix), None outside specfleet."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in known:
            return name
    return None


def violations(sources: dict[str, tuple[str, str, bool]]) -> list[str]:
    """One line per broken rule. `sources`: module -> (file, source, is_package)."""
    layers = {m: layer_of(m) for m in sources}
    known = set(sources)
    problems: list[str] = []
    graph: dict[str, set[str]] = {m: set() for m in known}
    for module, (path, source, is_package) in sorted(sources.items()):
        layer = layers.get(module)
        for imp in imports_of(module, source, path, is_package, known):
            target = owner(imp.target, known)
            where = f"{imp.path}:{imp.line}: {module} imports {imp.target}"
            if target is None:
                top = imp.target.split(".")[0]
                if top == "specfleet":
                    problems.append(f"{where}: no such specfleet module")
                elif layer == "host" and top not in sys.stdlib_module_names | HOST_ENVIRONMENT.get(module, set()):
                    problems.append(f"{where}: a host program imports only the standard library")
                elif top in BANNED.get(layer, ()):
                    problems.append(f"{where}: the {layer} layer must not import {top}")
                continue
            if imp.in_function:
                problems.append(f"{where} inside a function: import it at the top of the module (a cycle? move the "
                                "shared piece to a module both can import)")
            else:  # importing a.b.c first runs a/__init__.py and a/b/__init__.py: unless the importer is inside them
                graph[module].add(target)
                outer = [pkg for pkg in ancestors(target) if pkg not in [*ancestors(module), module]]
                graph[module].update(pkg for pkg in outer if pkg in known)
            target_layer = layers.get(target)
            if target_layer == "cli" and layer != "cli" and module != "specfleet.__main__":
                problems.append(f"{where}: nothing but specfleet/__main__.py imports the command line")
            elif layer is not None and target_layer is not None and target_layer not in MAY_IMPORT[layer]:
                problems.append(f"{where}: the {layer} layer must not import the {target_layer} layer")
    problems += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(graph)]
    return problems


def ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per back edge found by a depth-first search (each reported once)."""
    found: list[list[str]] = []
    seen: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                if frozenset(cycle) not in seen:
                    seen.add(frozenset(cycle))
                    found.append(cycle)
            elif nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
    return found


def package_sources() -> dict[str, tuple[str, str, bool]]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] in EXCLUDED or "__pycache__" in rel.parts:
            continue
        out[module_name(path)] = (str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"),
                                  path.name == "__init__.py")
    return out


def test_specfleet_imports_one_way():
    problems = violations(package_sources())
    assert not problems, "\n" + "\n".join(problems)


def test_the_check_catches_each_kind_of_violation():
    sources = {
        "specfleet": ("specfleet/__init__.py", "", True),
        "specfleet.a": ("specfleet/a.py", "import json\n\ndef f():\n    from . import b\n", False),
        "specfleet.b": ("specfleet/b.py", "import click\nfrom .x.steps import y\n", False),
        "specfleet.x": ("specfleet/x/__init__.py", "", True),
        "specfleet.x.steps": ("specfleet/x/steps.py", "from specfleet import b\nfrom ..cli import main\n", False),
        "specfleet.cli": ("specfleet/cli/__init__.py", "from ..x.steps import y\n", True),
        "specfleet.host": ("specfleet/host/__init__.py", "", True),
        "specfleet.host.h": ("specfleet/host/h.py", "import os\nimport yaml\n", False),
        "specfleet.p": ("specfleet/p/__init__.py", "", True),
        "specfleet.p.run": ("specfleet/p/run.py", "from pyinfra import host\nfrom specfleet.cli import main\n", False),
        "specfleet.p.rules": ("specfleet/p/rules.py", "from pyinfra import host\n", False),
        "specfleet.g": ("specfleet/g/__init__.py", "", True),
        "specfleet.g.host": ("specfleet/g/host/__init__.py", "", True),
        "specfleet.g.host.tool": ("specfleet/g/host/tool.py", "import layout\nfrom layout import X\nimport specfleet\n",
                                  False),
        "specfleet.host.layout": ("specfleet/host/layout.py", "from dataclasses import dataclass\n", False),
        "specfleet.run": ("specfleet/run/__init__.py", "from .t import y\n", True),
        "specfleet.run.t": ("specfleet/run/t.py", "from .. import p\nfrom . import u\n", False),
        "specfleet.run.u": ("specfleet/run/u.py", "", False),
        "specfleet.status": ("specfleet/status.py", "from .run.u import z\n", False),
    }
    problems = "\n".join(violations(sources))
    for expected in (
        "specfleet/a.py:4: specfleet.a imports specfleet.b inside a function",
        "specfleet/b.py:1: specfleet.b imports click: the core layer must not import click",
        "specfleet/b.py:2: specfleet.b imports specfleet.x.steps: the core layer must not import the pyinfra layer",
        "specfleet/x/steps.py:2: specfleet.x.steps imports specfleet.cli: nothing but specfleet/__main__.py imports",
        "specfleet/p/run.py:2: specfleet.p.run imports specfleet.cli: nothing but",
        "specfleet/p/rules.py:1: specfleet.p.rules imports pyinfra: the core layer must not import pyinfra",
        "specfleet/host/h.py:2: specfleet.host.h imports yaml: a host program imports only the standard library",
        "import cycle: specfleet.b -> specfleet.x.steps -> specfleet.b",
        "specfleet/g/host/tool.py:3: specfleet.g.host.tool imports specfleet: the host layer must not import the core",
    ):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"
    # a sibling installed next to it, though packaged in another feature's folder
    assert "specfleet/g/host/tool.py:1" not in problems and "specfleet/g/host/tool.py:2" not in problems
    assert "specfleet/host/h.py:1" not in problems and "specfleet/p/run.py:1" not in problems  # stdlib in host; pyinfra
    assert "specfleet/cli/__init__.py" not in problems  # the cli may import the pyinfra layer
    assert "import cycle: specfleet.run ->" not in problems  # a package importing its own modules is no cycle
    graph = {"specfleet.q": {"specfleet.s"}, "specfleet.s": {"specfleet.s.t"}, "specfleet.s.t": {"specfleet.q"}}
    sources["specfleet.run.t"] = ("specfleet/run/t.py", "from .. import status\n", False)
    assert "import cycle: specfleet.run -> specfleet.run.t -> specfleet.status -> specfleet.run" in violations(sources)
    assert cycles(graph) == [["specfleet.q", "specfleet.s", "specfleet.s.t", "specfleet.q"]]


def test_a_module_layer_is_read_from_its_role_name():
    assert layer_of("specfleet.gateway.steps.gateways") == "pyinfra"
    assert layer_of("specfleet.gateway.host.drain") == "host"
    assert layer_of("specfleet.gateway.render") == "core"
    assert layer_of("specfleet.cli.status") == "cli"  # the first role-named part decides
    assert layer_of("specfleet.host.status") == "host"
    assert layer_of("specfleet.overview.run") == "pyinfra"
    assert layer_of("specfleet.plan") == "core"
    assert layer_of("specfleet.__main__") == "entry"


def test_host_programs_and_templates_have_unique_names():
    """Host programs are installed side by side in one directory, and the one jinja Environment finds a template by
    its file name: a second file of the same name in another feature's folder would shadow the first."""
    hosts = [p for p in PACKAGE.rglob("*") if p.is_file() and "host" in p.relative_to(PACKAGE).parts[:-1]
             and p.suffix in {".py", ".sh", ".lua"} and p.name != "__init__.py"]
    templates = list(PACKAGE.glob("*/templates/*.j2"))
    for files in (hosts, templates):
        names = [p.name for p in files]
        assert len(files) > 5 and len(names) == len(set(names)), sorted(names)
    assert sorted(program_names()) == sorted(p.name for p in hosts)
    assert set(HOST_PROGRAMS.values()) <= program_names()


def test_feature_packages_import_nothing():
    """A feature's `__init__.py` stays empty: re-exports would add edges to the package and make cycles."""
    composers = {"specfleet", "specfleet.cli", "specfleet.steps", "specfleet.testinfra"}
    offenders = [path for m, (path, source, is_package) in package_sources().items()
                 if is_package and m not in composers and any(
                     isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(ast.parse(source)))]
    assert not offenders, offenders


def test_relative_imports_resolve_to_modules():
    known = {"specfleet", "specfleet.steps", "specfleet.steps.jobs", "specfleet.plan", "specfleet.cli",
             "specfleet.cli.rollout"}
    found = imports_of("specfleet.steps.jobs", "from .state import x\nfrom ..plan import HostPlan\n"
                       "from .. import plan\n", "j.py", False, known)
    assert [i.target for i in found] == ["specfleet.steps.state", "specfleet.plan", "specfleet.plan"]
    found = imports_of("specfleet.cli", "from . import rollout\nfrom .rollout import f\n", "c.py", True, known)
    assert [i.target for i in found] == ["specfleet.cli.rollout", "specfleet.cli.rollout"]
