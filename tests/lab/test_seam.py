"""Above the seam (specfleet_lab.Host, Fleet, Driver), the tests name no driver's internals: no QEMU argument, pid
file, overlay or console file, no signal to a host's process, no docker command on the lab's engine, no import of a
driver's package. A scenario that needs a kernel of its own says so with pytest.mark.kernel(<row>) naming a row of
the fidelity ledger (docs/dev/lab.md), and its hosts are then QEMU guests. The lab's own unit tests (tests/lab) test
the drivers, and are the only tests that may."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEDGER = ROOT / "docs" / "dev" / "lab.md"
#: (what, pattern) of a driver's internals in a test's source
INTERNALS = (
    ("a QEMU command line", re.compile(r"qemu-system-|-netdev\b|hostfwd|qemu_argv|\bqesc\(")),
    ("a QEMU guest's files", re.compile(r"\.(pidfile|overlay|console_log)\b")),
    ("a signal to a host's process", re.compile(r"\bSIG(STOP|CONT)\b|\b(g|guest|victim|host|spark)\.pid\b")),
    ("a docker command on the lab's engine",
     re.compile(r"""subprocess\.\w+\(\s*\[\s*["']docker["']|docker -H|DOCKER_HOST|\bengine\.docker\(""")),
    ("a driver's package", re.compile(r"specfleet_lab\.(qemu|container)\b|from specfleet_lab\.(qemu|container)")),
    ("a container engine's bridge, cgroup or loop device",
     re.compile(r"""["']sfl["'{]|/specfleet-lab-\{|\blosetup\b""")),
)
#: the VM tier also never names QEMU's NAT address (product unit tests use such addresses as data)
VM_INTERNALS = (("QEMU's NAT address", re.compile(r"10\.0\.2\.[23]\b")),)


def internals(text: str, patterns=INTERNALS) -> list[tuple[int, str]]:
    """(line number, what) of every line of `text` that names a driver's internal."""
    return [(n, what) for n, line in enumerate(text.splitlines(), 1) for what, pattern in patterns
            if pattern.search(line)]


def _test_sources() -> list[Path]:
    """Every test source but the lab's own tests and the script that installs the lab's packages."""
    return sorted(p for p in (ROOT / "tests").rglob("*") if p.suffix in (".py", ".sh") and p.is_file()
                  and not p.is_relative_to(ROOT / "tests" / "lab") and p.name != "install-deps.sh")


def test_no_test_above_the_seam_names_a_drivers_internals():
    found = [f"{p.relative_to(ROOT)}:{n}: {what}" for p in _test_sources()
             for n, what in internals(p.read_text(), INTERNALS + (VM_INTERNALS if "vm" in p.parts else ()))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line", [
    'argv = ["qemu-system-x86_64", "-m", "2048"]', "assert not victim.pidfile.exists()", "engine.docker('ps')",
    'url = "http://10.0.2.2:8999"', "os.kill(g.pid, signal.SIGSTOP)", 'subprocess.run(["docker", "ps"])',
    "from specfleet_lab.qemu.guest import QemuHost", 'name.startswith("sfl")',
    'Path("/sys/fs/cgroup").glob(f"*/specfleet-lab-{run}")', 'subprocess.run(["losetup", "-a"])'])
def test_the_scan_finds_each_kind(line):
    assert internals(line, INTERNALS + VM_INTERNALS), line  # seen failing on each line with its pattern removed


def _kernel_rows() -> dict[str, str]:
    """The rows the tests name in pytest.mark.kernel(...), and where."""
    rows = {}
    for p in sorted((ROOT / "tests" / "vm").glob("test_*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "kernel"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                rows[node.args[0].value] = p.name
    return rows


def test_each_kernel_marker_names_a_row_of_the_ledger():
    rows = _kernel_rows()
    assert rows, "no scenario is marked kernel(...)"
    ledger = LEDGER.read_text()
    missing = {row: where for row, where in rows.items() if f"| `{row}` |" not in ledger}
    assert not missing, f"kernel(...) rows with no row in {LEDGER.relative_to(ROOT)}: {missing}"
