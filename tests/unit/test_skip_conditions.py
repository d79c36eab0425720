"""No test skips because of what a cache holds or of what an earlier test left behind.

A skip may read the machine (its tools, its user, its kernel and limits) or the run's own choices (`--full`, a
parameter), never the lab's cache (`~/.cache/specfleet`, SPECFLEET_CACHE_DIR, pytest's cache): a cache is filled by
the first run that builds, so a skip on it runs on a warm machine and skips on a cold one, where nobody looks. Nor
module state that a test function writes: it holds only after that test ran and passed, in that order. What a test
needs from a cache, a fixture builds (e.g. tests/vm/conftest.py: standin_rootfs); an error then says what is missing.

Read with `ast`, so that it fails on every machine, warm or cold, in seconds (a check at run time would see a skip
only where it happens: on the cold machine, at the end of a CI run). Each skip site (pytest.mark.skipif's condition;
pytest.skip, pytest.mark.skip or pytest.importorskip under the `if`s, loops and `try` around it) is followed through
the local variables it reads, the module's helpers and constants, and what it imports from tests/, benchmarks/ and
the lab; it fails on a name or a string that says cache, and on a module-level name that a test function writes. A
fixture's value is not followed: a fixture is where a test gets what a cache holds (it builds what is missing).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the trees whose skips run in a test run: the tests, the benchmarks, and the testinfra suite tests/infra runs
TREES = (ROOT / "tests", ROOT / "benchmarks", ROOT / "specfleet" / "testinfra")
#: where an imported module's source is, by its top-level package (others, e.g. the standard library: not followed)
PACKAGES = {"tests": ROOT, "benchmarks": ROOT, "specfleet_lab": ROOT / "lab"}
CACHE = re.compile(r"cache", re.IGNORECASE)
MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "pop", "popitem", "remove", "discard",
            "clear"}
SKIP_CALLS = {"skip", "importorskip"}  # pytest.skip(...), pytest.importorskip(...), pytest.mark.skip(...)
SKIPIF_CALLS = {"skipif", "skipIf", "skipUnless"}  # pytest.mark.skipif, unittest's


@dataclass
class Module:
    path: Path
    tree: ast.Module
    parents: dict = field(default_factory=dict)  # node -> its parent
    defs: dict = field(default_factory=dict)  # top-level name -> [nodes that give its value]
    imports: dict = field(default_factory=dict)  # local name -> (module, name in it or None for the module)
    written: dict = field(default_factory=dict)  # top-level name -> the test functions that write it


@cache
def load(path: Path, source: str | None = None) -> Module:
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    m = Module(path, tree)
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            m.parents[child] = node
    for stmt in tree.body:
        _top_level(m, stmt)
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test"):
            for name in _written(stmt):
                if name in m.defs:
                    m.written.setdefault(name, []).append(stmt.name)
    return m


def _top_level(m: Module, stmt: ast.stmt) -> None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        m.defs[stmt.name] = [stmt]
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    m.defs.setdefault(name.id, []).append(stmt.value)
    elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
        for alias in stmt.names:
            m.imports[alias.asname or alias.name] = (stmt.module, alias.name)
    elif isinstance(stmt, ast.Import):
        for alias in stmt.names:
            m.imports[alias.asname or alias.name.split(".")[0]] = (alias.name if alias.asname else
                                                                   alias.name.split(".")[0], None)


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _written(fn: ast.AST) -> set[str]:
    """The names whose object a function changes: `X[k] = `, `X.a = `, `del X[k]`, `X.append(...)`, `global X`."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Global):
            out.update(node.names)
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        out.update(n for t in targets if isinstance(t, (ast.Subscript, ast.Attribute)) and (n := _root_name(t)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            out.update(n for n in [_root_name(node.func.value)] if n)
    return out


def source_of(module: str) -> Path | None:
    base = PACKAGES.get(module.split(".")[0])
    if base is None:
        return None
    stem = base.joinpath(*module.split("."))
    return next((p for p in (stem.with_suffix(".py"), stem / "__init__.py") if p.is_file()), None)


class Reads:
    """What an expression reads, followed through locals, the module's definitions and imported test modules: the
    findings (a cache, or module state a test writes), each once."""

    def __init__(self):
        self.findings: list[str] = []
        self.seen: set = set()

    def expr(self, m: Module, node: ast.AST, scope: ast.AST | None) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and CACHE.search(n.value):
                self._found(f"the string {n.value!r} ({m.path.name}:{n.lineno})")
            elif isinstance(n, ast.Name):
                self.name(m, n.id, scope, n.lineno)
            elif isinstance(n, ast.Attribute):
                if CACHE.search(n.attr):
                    self._found(f"`{n.attr}` ({m.path.name}:{n.lineno})")
                if isinstance(n.value, ast.Name) and n.value.id in m.imports and m.imports[n.value.id][1] is None:
                    self.imported(m.imports[n.value.id][0], n.attr)

    def name(self, m: Module, name: str, scope: ast.AST | None, line: int) -> None:
        if CACHE.search(name):
            self._found(f"`{name}` ({m.path.name}:{line})")
        if scope is not None and name in _arguments(scope):
            return  # a parameter: a fixture's value (the fixture builds what it needs) or the caller's
        local = _local_values(scope, name) if scope is not None else []
        if local:
            for value in local:
                self._follow(m, value, scope)
        elif name in m.written:
            self._found(f"`{name}`, which {', '.join(m.written[name])} write(s) ({m.path.name}:{line})")
        elif name in m.defs:
            for value in m.defs[name]:
                self._follow(m, value, value if isinstance(value, ast.FunctionDef) else None)
        elif name in m.imports and m.imports[name][1] is not None:
            module, attr = m.imports[name]
            self.imported(module, attr)
            self.imported(f"{module}.{attr}", None)  # `from tests.vm import lab`: lab is a module

    def imported(self, module: str, name: str | None) -> None:
        path = source_of(module)
        if path is not None and name is not None:
            other = load(path)
            for value in other.defs.get(name, []):
                self._follow(other, value, value if isinstance(value, ast.FunctionDef) else None)

    def _follow(self, m: Module, node: ast.AST, scope: ast.AST | None) -> None:
        if (m.path, id(node)) not in self.seen:
            self.seen.add((m.path, id(node)))
            self.expr(m, node, scope)

    def _found(self, what: str) -> None:
        if what not in self.findings:
            self.findings.append(what)


def _arguments(fn: ast.AST) -> set[str]:
    a = fn.args if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    return set() if a is None else {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x}


def _local_values(fn: ast.AST, name: str) -> list[ast.AST]:
    """What a function binds `name` to (assignments, loop and `with` targets, walrus)."""
    out: list[ast.AST] = []
    for node in ast.walk(fn):
        pairs = [(t, node.value) for t in node.targets] if isinstance(node, ast.Assign) else \
            [(node.target, node.value)] if isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) else \
            [(node.target, node.iter)] if isinstance(node, (ast.For, ast.comprehension)) else \
            [(i.optional_vars, i.context_expr) for i in node.items] if isinstance(node, ast.With) else []
        out += [v for t, v in pairs if v is not None and t is not None
                and any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(t))]
    return out


def _guards(m: Module, site: ast.AST) -> tuple[list[ast.AST], ast.AST | None]:
    """The conditions a skip call runs under (the tests of the `if`s and loops around it, the body of the `try`
    whose handler holds it) and the function it is in."""
    conditions: list[ast.AST] = []
    node, child = m.parents.get(site), site
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            conditions.append(node.test)
        elif isinstance(node, (ast.For, ast.comprehension)):
            conditions.append(node.iter)
        elif isinstance(node, ast.Try) and isinstance(child, ast.ExceptHandler):
            conditions += node.body
        node, child = m.parents.get(node), node
    return conditions, node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _skip_kind(call: ast.Call) -> str | None:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)
    return "skipif" if name in SKIPIF_CALLS else "skip" if name in SKIP_CALLS else None


def findings(path: Path, source: str | None = None) -> list[str]:
    """`file:line: what the skip reads` for each skip site of a module that reads a cache or a test's state."""
    m = load(path, source)
    out = []
    for call in (n for n in ast.walk(m.tree) if isinstance(n, ast.Call) and _skip_kind(n)):
        reads = Reads()
        conditions, scope = _guards(m, call)
        if _skip_kind(call) == "skipif":
            cond = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "condition"), None)
            if isinstance(cond, ast.Constant) and isinstance(cond.value, str):  # pytest evaluates a string
                cond = ast.parse(cond.value, mode="eval").body
            conditions = [c for c in [cond] if c is not None]
        for c in conditions:
            reads.expr(m, c, scope)
        reasons = [*call.args[1:], *(k.value for k in call.keywords if k.arg in ("reason", "msg"))]
        if _skip_kind(call) == "skip":
            reasons += call.args[:1]
        for text in (n for r in reasons for n in ast.walk(r) if isinstance(n, ast.Constant)):
            if isinstance(text.value, str) and CACHE.search(text.value):
                reads.findings.append(f"a reason that names a cache: {text.value!r}")
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        out += [f"{rel}:{call.lineno}: this skip reads {what}" for what in reads.findings]
    return out


def _sources() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py"))


def _sites(path: Path) -> int:
    return sum(1 for n in ast.walk(load(path).tree) if isinstance(n, ast.Call) and _skip_kind(n))


def test_no_skip_reads_a_cache_or_what_an_earlier_test_wrote():
    found = [line for path in _sources() for line in findings(path)]
    assert not found, "\n".join(found)


def test_the_scan_sees_the_trees_skips():
    """It reads every skip of the trees: the root-only, tool and tier skips among them (not one site less)."""
    sites = {p.relative_to(ROOT).as_posix(): _sites(p) for p in _sources() if _sites(p)}
    assert sites["tests/conftest.py"] == 1 and sites["tests/unit/test_drop_caches.py"] == 1, sites
    assert sites["tests/vm/test_registry_standin.py"] >= 1 and "specfleet/testinfra/converged.py" in sites, sites
    assert sum(sites.values()) >= 25, sites


SAMPLE = ROOT / "tests" / "vm" / "test_sample.py"  # where a sample module is read as being (its imports resolve)


def _lines(source: str) -> list[str]:
    """The lines of the sample's skips that the scan fails on."""
    return sorted({line.split(": this skip reads ", 1)[0].rsplit(":", 1)[1] for line in findings(SAMPLE, source)},
                  key=int)


def test_the_scan_fails_on_the_skip_that_skipped_on_a_cold_machine():
    """The stand-in rootfs test as it was: its skipif called a helper that globbed the lab's cache."""
    source = (
        "import os\nfrom pathlib import Path\nimport pytest\n"
        "def _lab_rootfs():\n"
        "    base = Path(os.environ.get('SPECFLEET_CACHE_DIR') or Path.home() / '.cache' / 'specfleet')\n"
        "    tars = sorted(base.glob('trtllm-standin-*.tar'))\n"
        "    return tars[-1] if tars else None\n"
        "@pytest.mark.skipif(_lab_rootfs() is None, reason='no stand-in rootfs tar')\n"
        "def test_layers():\n"
        "    pass\n")
    assert _lines(source) == ["8"], findings(SAMPLE, source)


def test_the_scan_follows_locals_imports_and_handlers():
    source = (
        "import pytest\nfrom tests.vm import wheelhouse as wh\nfrom tests.vm.conftest import cache_dir as where\n"
        "def olah():\n"
        "    house = wh.prepare(where())\n"  # a local bound to what an imported helper reads
        "    if house is None:\n"
        "        pytest.skip('no wheelhouse')\n"
        "def tar():\n"
        "    try:\n"
        "        return next(where().glob('*.tar'))\n"
        "    except StopIteration:\n"
        "        pytest.skip('none built yet')\n"  # a skip in the handler of a try that reads the cache
        "@pytest.mark.skipif('not any(where().iterdir())', reason='x')\n"  # a condition as a string
        "def test_x(): pass\n")
    assert _lines(source) == ["7", "12", "13"], findings(SAMPLE, source)


def test_the_scan_fails_on_a_skip_on_what_an_earlier_test_wrote():
    source = (
        "import pytest\nSTATE = {}\n"
        "def test_join():\n    STATE['gateway'] = 1\n"
        "def test_rollout():\n"
        "    gateway = STATE.get('gateway')\n"
        "    if gateway is None:\n"
        "        pytest.skip('the gateway did not join (the previous test failed)')\n")
    assert _lines(source) == ["8"], findings(SAMPLE, source)
    assert "which test_join write(s)" in findings(SAMPLE, source)[0]


def test_the_scan_passes_skips_on_the_machine_and_the_run():
    """Root, a tool, a host's answer through a fixture, a parameter, the full tier; a fixture may write module
    state, and a test may write state no skip reads."""
    source = (
        "import os, shutil\nimport pytest\nSTATE = {}\nSEEN = []\n"
        "as_root = pytest.mark.skipif(os.geteuid() != 0, reason='root')\n"
        "@pytest.fixture\ndef fleet():\n    STATE['fleet'] = 1\n"
        "@pytest.mark.skipif(shutil.which('skopeo') is None, reason='skopeo is not installed')\n"
        "def test_a(mirror_guest, request):\n"
        "    SEEN.append(1)\n"
        "    if STATE['fleet'] is None or request.node.callspec.params['driver'] != 'container':\n"
        "        pytest.skip('the first driver only')\n"
        "    mounted = mirror_guest.ssh('mount -t tmpfs tmpfs /x')\n"
        "    if mounted.returncode:\n"
        "        pytest.skip('no tmpfs on this host')\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    skip = pytest.mark.skip(reason='heaviest VM scenario: runs with --full')\n"
        "    for item in items:\n"
        "        if 'full' in item.keywords:\n"
        "            item.add_marker(skip)\n")
    assert findings(SAMPLE, source) == []
