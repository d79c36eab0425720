"""specfleet's modules import one way: core <- pyinfra layer <- command line; host programs import only the stdlib.

Every module's imports are read with `ast` (also those inside functions), relative imports resolved. The test fails,
naming file:line, on:
- a specfleet import inside a function (it hides a cycle or a layer breach from the reader and from this test);
- an import against the direction (below);
- an import cycle among specfleet modules (top-level imports).

The layers (a module's layer is declared here, and only here; a module missing from LAYERS fails the test):
- core: pure; no pyinfra, no click, no gevent. Imports core (and host) only.
- pyinfra: facts, steps, and what runs deploys on hosts through pyinfra's API. Imports core and pyinfra (and host); no
  click.
- cli: click commands only. Imports anything but the entry point; nothing but the entry point imports it.
- host: programs shipped to the hosts and run there: the stdlib only (and their siblings in specfleet/host/, installed
  next to them). Anyone may import them (the host layout is also the controller's).
- testinfra: the checks a project's tests/infra collects: core (and host) only.
- entry: the console script (`specfleet/__main__.py`): gevent's monkey-patching, then the cli.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "specfleet"
EXCLUDED = ("scaffold",)  # specfleet/scaffold/: a project's files that `specfleet init` writes (they import specfleet)

LAYERS = {
    # ---- core: pure (no pyinfra, no click, no gevent) ----
    "specfleet": "core",  # the package: its version
    "specfleet.project": "core",  # which directory is the fleet project; the scaffold files `specfleet init` writes
    "specfleet.inventory": "core",  # the fleet file (Ansible YAML inventory) read into hosts, groups and vars
    "specfleet.fleet": "core",  # the package of the fleet model (empty)
    "specfleet.fleet.model": "core",  # THE parsed fleet: hosts, groups, connection and deploy vars split once, roles
    "specfleet.settings": "core",  # the validated per-host settings, built from the defaults and the inventory
    "specfleet.tunables": "core",  # the packaged defaults, the project's group_data/all.py overrides, connection vars
    "specfleet.topology": "core",  # the URL at which the other hosts reach the hub_mirror group's mirror
    "specfleet.problems": "core",  # a problem with the user's input as one line; pydantic's errors said that way
    "specfleet.defaults": "core",  # the packaged defaults of every variable (package data, also imported)
    "specfleet.llm_options": "core",  # TensorRT-LLM's options schema per version (extra-llm-api-config.yml)
    "specfleet.trtllm_versions": "core",  # the per-version contract of TensorRT-LLM (a data table)
    "specfleet.constants": "core",  # platform constants (facts about the tools specfleet drives, not tunables)
    "specfleet.grammars": "core",  # what each kind of string value may be (URLs, addresses, images, refs, versions)
    "specfleet.profiles": "core",  # the deploy profiles (eagle3, draft_target, baseline) as data
    "specfleet.hub": "core",  # model pins resolved on the Hub (controller-side HTTP, no host)
    "specfleet.registry": "core",  # image digests resolved in the registry (controller-side HTTP, no host)
    "specfleet.lockfile": "core",  # the fleet's lock file: read, written, which fleets to lock
    "specfleet.render": "core",  # every file rendered for a serving host (config, unit, smoke), the host paths
    "specfleet.plan": "core",  # the per-host plan (settings + pins + release id); pyinfra's inventory groups
    "specfleet.validate_in_image": "core",  # the command that validates a config with the image's own TensorRT-LLM
    "specfleet.api_keys": "core",  # the gateway's client API keys, read on the controller (never shown)
    "specfleet.gateway_fleet": "core",  # the gateway group: roles, addresses, what each Spark serves, rules between hosts
    "specfleet.pair_fleet": "core",  # two Sparks as one server: the pair groups, roles, link addresses, their rules
    "specfleet.pair_files": "core",  # a pair's files: the link's netplan, the worker's authorized_keys line for the MPI key
    "specfleet.pair_launch": "core",  # THE head's mpirun line of a pair (the worker's gate lets its daemon launch through)
    "specfleet.gateway_files": "core",  # the gateway's HAProxy config, model/path maps and key map, rendered
    "specfleet.mirror_files": "core",  # the Hub mirror's layout, units, config and advertised URL, rendered
    "specfleet.selection": "core",  # --limit, --batches, --max-fail: which hosts, in which batches
    "specfleet.status_report": "core",  # what `specfleet status` makes of the hosts' answers: health, rows, table
    "specfleet.bench": "core",  # bench variants, prompts, statistics, table, plot, the fleet-file rewrite
    # ---- pyinfra layer: facts, steps, running deploys on hosts ----
    "specfleet.gateway": "pyinfra",  # the gateway host's status read (GatewayStatus), its part of a Spark's
    "specfleet.facts": "pyinfra",  # the host's status read (SpecfleetHost, ReleaseStatus), composed of parts
    "specfleet.release_status": "pyinfra",  # the status read's platform and release parts, the release's files
    "specfleet.memory_status": "pyinfra",  # the status read's memory part, the OOM drop-ins
    "specfleet.pair_status": "pyinfra",  # the status read's pair part: interfaces, addresses, links, pings
    "specfleet.runner": "pyinfra",  # run a packaged deploy on a set of hosts through pyinfra's API
    "specfleet.rollout": "pyinfra",  # the rollout: lock, warm the mirror, stage, switch in batches behind the gate
    "specfleet.status": "pyinfra",  # the status probe (HostOverview fact + its deploy) and the journal over ssh
    "specfleet.bench_run": "pyinfra",  # the bench: rounds of variants staged, switched, loaded, hosts restored
    "specfleet.mirror": "pyinfra",  # the mirror host's status fact (MirrorStatus), its warm-up, its part of a Spark's
    "specfleet.preview": "pyinfra",  # what a converge would change on each host, read without changing anything
    "specfleet.steps": "pyinfra",  # the packaged deploys composed: converge, stage, switch
    "specfleet.steps.state": "pyinfra",  # the host's plan and its one status read, wanted files, refuse
    "specfleet.steps.coordination": "pyinfra",  # what the hosts of one run share (per pyinfra State); waits between hosts
    "specfleet.steps.changes": "pyinfra",  # what a converge would change, decided from the one status read
    "specfleet.steps.behind_gateways": "pyinfra",  # a Spark behind gateways: filtering socket, agent, gateways.json
    "specfleet.steps.pair": "pyinfra",  # a pair host's MPI trust: the head's key, the worker's login, the host key pin
    "specfleet.steps.pair_link": "pyinfra",  # a pair host's link: netplan staged, pair-link apply and confirm, ping
    "specfleet.steps.gateway": "pyinfra",  # the gateway hosts: HAProxy, its files, checked config, reload or key sync
    "specfleet.steps.cleanup": "pyinfra",  # step: remove what specfleet installed
    "specfleet.steps.docker_access": "pyinfra",  # step: operator users in the docker group
    "specfleet.steps.oom": "pyinfra",  # step: dockerd last under memory pressure (its drop-in and running figure)
    "specfleet.steps.encodings": "pyinfra",  # step: the tiktoken encodings
    "specfleet.steps.jobs": "pyinfra",  # host jobs: long commands run detached on the host, followed
    "specfleet.steps.lock": "pyinfra",  # step: the run lock
    "specfleet.steps.mirror": "pyinfra",  # steps: set up the Hub mirror, warm it
    "specfleet.steps.models": "pyinfra",  # step: fetch the pinned models
    "specfleet.steps.preflight": "pyinfra",  # step: refuse early (disk, docker, GPU)
    "specfleet.steps.release": "pyinfra",  # step: write the release's files
    "specfleet.steps.rollback": "pyinfra",  # deploy: switch back to an earlier release
    "specfleet.steps.service": "pyinfra",  # step: activate the release and gate it; the switch checks
    "specfleet.steps.token": "pyinfra",  # step: the Hugging Face token file
    "specfleet.steps.tools": "pyinfra",  # step: the host tools and the fetch virtualenv
    # ---- cli: click only; only the entry point imports it ----
    "specfleet.cli": "cli",  # the `specfleet` group, check, render; registers every command
    "specfleet.cli.invalid": "cli",  # the checks of arguments; the one way a command refuses them (exit 2)
    "specfleet.cli.rollout": "cli",  # rollout, releases
    "specfleet.cli.status": "cli",  # status, logs
    "specfleet.cli.bench": "cli",  # bench
    "specfleet.cli.mirror": "cli",  # mirror status
    "specfleet.cli.lock": "cli",  # lock, plan
    "specfleet.cli.project": "cli",  # init, vars
    # ---- host programs: stdlib only, shipped to the hosts ----
    "specfleet.host": "host",  # the package of the host programs
    "specfleet.host.specfleet_host": "host",  # specfleet-host: releases, activation and gate, jobs, status, lock
    "specfleet.host.fetch_model": "host",  # the resumable model fetch
    "specfleet.host.bench_load": "host",  # the bench's load client
    "specfleet.host.layout": "host",  # THE host layout: paths, unit names, the host tool's command line
    "specfleet.host.hostlib": "host",  # the host tool's helpers
    "specfleet.host.haproxy_admin": "host",  # drain, re-admit and read Sparks on a gateway (HAProxy runtime API)
    "specfleet.host.gateway_agent": "host",  # the readiness agent the gateways ask (agent-check): up or down
    "specfleet.host.release_state": "host",  # THE reader of the release state (installed, and shipped by probes)
    "specfleet.host.pair_link": "host",  # a pair host's link: netplan try, confirmed by the controller or reverted
    "specfleet.host.pair_gate": "host",  # the worker's forced command for the head's keys: the launch, or the switch
    "specfleet.host.readiness": "host",  # the readiness gate's probe: unit active, /health 200, the smoke completion
    "specfleet.memory": "core",  # whether a profile fits a host's unified memory (pure arithmetic on the lock)
    "specfleet.host.host_jobs": "host",  # host jobs: work detached from the SSH session (the host tool's job)
    "specfleet.host.release_stage": "host",  # staging a release's files from one bundle (the host tool's stage)
    "specfleet.host.pair_switch": "host",  # a pair's switch over both hosts, driven by the head's host job
    "specfleet.host.drain": "host",  # a Spark drains itself before a restart behind gateways (acks, requests in flight)
    "specfleet.host.probes": "host",  # read-only programs run on the host
    "specfleet.host.probes.validate_config": "host",  # validates a config with the image's own TensorRT-LLM
    "specfleet.host.probes.overview": "host",  # what `specfleet status` shows of a host; THE acceptance arithmetic
    "specfleet.host.probes.mirror_warm": "host",  # warms the Hub mirror: each needed file read through olah once
    "specfleet.host.probes.olah_ready": "host",  # waits for the Hub mirror's olah to answer on its loopback port
    "specfleet.host.probes.file_status": "host",  # the status read's sizes, file states and groups, in one process
    # ---- the checks a project's tests/infra collects ----
    "specfleet.testinfra": "testinfra",  # the package
    "specfleet.testinfra.converged": "testinfra",  # checks of a converged host
    "specfleet.testinfra.fixtures": "testinfra",  # the `spark` fixture (a host + its plan)
    "specfleet.testinfra.real_gpu": "testinfra",  # checks that need a real GPU
    # ---- the console script ----
    "specfleet.__main__": "entry",  # gevent's monkey-patching, then specfleet.cli.main
}

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
    "core": {"pyinfra", "pyinfra_cli", "click", "gevent"},
    "pyinfra": {"click", "pyinfra_cli"},
    "testinfra": {"pyinfra_cli", "click", "gevent"},
}
# host programs run with another Python than the system's: what else each may import there
HOST_ENVIRONMENT = {
    "specfleet.host.fetch_model": {"huggingface_hub", "httpx2"},  # the fetch virtualenv's pinned huggingface_hub
    "specfleet.host.probes.validate_config": {"yaml"},  # runs in the image, with its own TensorRT-LLM and yaml
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

    def sibling(name: str) -> str:  # host programs import the modules installed next to them by their bare name
        near = f"{package}.{name}"
        return near if package.startswith("specfleet.host") and name and near in known else name

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


def owner(target: str, known: set[str]) -> str | None:
    """The specfleet module an import target names (the longest known prefix), None outside specfleet."""
    parts = target.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in known:
            return name
    return None


def violations(sources: dict[str, tuple[str, str, bool]], layers: dict[str, str]) -> list[str]:
    """One line per broken rule. `sources`: module -> (file, source, is_package)."""
    known = set(sources)
    problems = [f"{path}: module {m} has no layer: add it to LAYERS in tests/unit/test_layers.py"
                for m, (path, _, _) in sorted(sources.items()) if m not in layers]
    problems += [f"LAYERS names {m}, which does not exist: remove it" for m in sorted(set(layers) - known)]
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
    problems = violations(package_sources(), LAYERS)
    assert not problems, "\n" + "\n".join(problems)


def test_the_check_catches_each_kind_of_violation():
    sources = {
        "specfleet": ("specfleet/__init__.py", "", True),
        "specfleet.a": ("specfleet/a.py", "import json\n\ndef f():\n    from . import b\n", False),
        "specfleet.b": ("specfleet/b.py", "import click\nfrom .c import x\n", False),
        "specfleet.c": ("specfleet/c.py", "from specfleet import b\nfrom .cli import main\n", False),
        "specfleet.cli": ("specfleet/cli/__init__.py", "from ..c import x\n", True),
        "specfleet.h": ("specfleet/h.py", "import os\nimport yaml\n", False),
        "specfleet.p": ("specfleet/p.py", "from pyinfra import host\nfrom .cli import main\n", False),
        "specfleet.orphan": ("specfleet/orphan.py", "", False),
        "specfleet.host": ("specfleet/host/__init__.py", "", True),
        "specfleet.host.tool": ("specfleet/host/tool.py", "import layout\nfrom layout import X\nimport specfleet\n",
                                False),
        "specfleet.host.layout": ("specfleet/host/layout.py", "from dataclasses import dataclass\n", False),
        "specfleet.s": ("specfleet/s/__init__.py", "from .t import y\n", True),
        "specfleet.s.t": ("specfleet/s/t.py", "from .. import p\nfrom . import u\n", False),
        "specfleet.s.u": ("specfleet/s/u.py", "", False),
        "specfleet.q": ("specfleet/q.py", "from .s.u import z\n", False),
    }
    layers = {"specfleet": "core", "specfleet.a": "core", "specfleet.b": "core", "specfleet.c": "pyinfra",
              "specfleet.cli": "cli", "specfleet.h": "host", "specfleet.p": "pyinfra", "specfleet.gone": "core",
              "specfleet.s": "pyinfra", "specfleet.s.t": "pyinfra", "specfleet.s.u": "pyinfra",
              "specfleet.q": "pyinfra",
              "specfleet.host": "host", "specfleet.host.tool": "host", "specfleet.host.layout": "host"}
    problems = "\n".join(violations(sources, layers))
    for expected in (
        "specfleet/a.py:4: specfleet.a imports specfleet.b inside a function",
        "specfleet/b.py:1: specfleet.b imports click: the core layer must not import click",
        "specfleet/b.py:2: specfleet.b imports specfleet.c: the core layer must not import the pyinfra layer",
        "specfleet/c.py:2: specfleet.c imports specfleet.cli: nothing but specfleet/__main__.py imports the command",
        "specfleet/p.py:2: specfleet.p imports specfleet.cli: nothing but",
        "specfleet/h.py:2: specfleet.h imports yaml: a host program imports only the standard library",
        "import cycle: specfleet.b -> specfleet.c -> specfleet.b",
        "specfleet/orphan.py: module specfleet.orphan has no layer",
        "LAYERS names specfleet.gone, which does not exist",
        "specfleet/host/tool.py:3: specfleet.host.tool imports specfleet: the host layer must not import the core",
    ):
        assert expected in problems, f"{expected!r} not reported in:\n{problems}"
    assert "specfleet/host/tool.py:1" not in problems and "specfleet/host/tool.py:2" not in problems  # its sibling
    assert "specfleet/h.py:1" not in problems and "specfleet/p.py:1" not in problems  # stdlib in host; pyinfra
    assert "specfleet/cli/__init__.py" not in problems  # the cli may import the pyinfra layer
    assert "import cycle: specfleet.s ->" not in problems  # a package importing its own modules is no cycle
    graph = {"specfleet.q": {"specfleet.s"}, "specfleet.s": {"specfleet.s.t"}, "specfleet.s.t": {"specfleet.q"}}
    sources["specfleet.s.t"] = ("specfleet/s/t.py", "from .. import q\n", False)
    assert "import cycle: specfleet.q -> specfleet.s -> specfleet.s.t -> specfleet.q" in violations(sources, layers)
    assert cycles(graph) == [["specfleet.q", "specfleet.s", "specfleet.s.t", "specfleet.q"]]


def test_relative_imports_resolve_to_modules():
    known = {"specfleet", "specfleet.steps", "specfleet.steps.jobs", "specfleet.plan", "specfleet.cli",
             "specfleet.cli.rollout"}
    found = imports_of("specfleet.steps.jobs", "from .state import x\nfrom ..plan import HostPlan\n"
                       "from .. import plan\n", "j.py", False, known)
    assert [i.target for i in found] == ["specfleet.steps.state", "specfleet.plan", "specfleet.plan"]
    found = imports_of("specfleet.cli", "from . import rollout\nfrom .rollout import f\n", "c.py", True, known)
    assert [i.target for i in found] == ["specfleet.cli.rollout", "specfleet.cli.rollout"]
