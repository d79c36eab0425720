"""drop-caches (memory/host/drop_caches.sh), the serving unit's first ExecStartPre, so before every start of
the container: a host job's switch, a restart by systemd, a boot. Run as installed, in a mount namespace of its own
whose /proc/meminfo and /proc/sys/vm/drop_caches are scratch files (this machine's caches are never dropped)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specfleet.host.layout import CONTAINER_MEMORY_VAR
from specfleet.memory import rules as memory
from specfleet.serving.render import memory_cap_args, unit_text
from tests.unit.installed import source
from tests.unit.test_quoting import EXPANDED, _settings, exec_line

SCRIPT = source("drop_caches.sh")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace (CI is root)")


def _run(tmp_path: Path, writable: bool = True, cap: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, Path, Path]:
    meminfo, drop, record = tmp_path / "meminfo", tmp_path / "drop_caches", tmp_path / "mem-at-start.json"
    meminfo.write_text("MemTotal:       127535000 kB\nMemAvailable:    61440000 kB\n")
    drop.write_text("0\n")
    # the stand-in kernel: a write to drop_caches frees the page cache (MemAvailable rises), unless it refuses
    inner = (f'mount --bind {meminfo} /proc/meminfo && mount --bind {drop} /proc/sys/vm/drop_caches && '
             + ("" if writable else "mount -o remount,bind,ro /proc/sys/vm/drop_caches && ")
             + f'exec sh {SCRIPT} {record} {" ".join(cap)}')
    # a kernel that frees what it is asked to: after the write, MemAvailable reads higher (a second file swapped in)
    after = tmp_path / "meminfo.after"
    after.write_text("MemTotal:       127535000 kB\nMemAvailable:   122880000 kB\n")
    wrapper = tmp_path / "sync"  # sync is the script's own step before the drop; the stand-in swaps meminfo then
    wrapper.write_text(f"#!/bin/sh\nmount --bind {after} /proc/meminfo\n")
    wrapper.chmod(0o755)
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner],
                          capture_output=True, text=True, timeout=30, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    return proc, drop, record


def test_it_flushes_drops_the_page_cache_says_so_and_records_memavailable(tmp_path):
    proc, drop, record = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert drop.read_text().strip() == "3"  # the playbook's `echo 3 > /proc/sys/vm/drop_caches`
    assert proc.stdout.strip() == ("drop-caches: flushed dirty pages and dropped the page cache before the start: "
                                   "MemAvailable 60000 MiB -> 120000 MiB")
    got = json.loads(record.read_text())
    assert got["before_kb"] == 61440000 and got["after_kb"] == 122880000 and got["at"] > 0


def test_a_kernel_that_refuses_the_drop_is_said_and_never_fails_the_start(tmp_path):
    proc, drop, record = _run(tmp_path, writable=False)
    assert proc.returncode == 0, proc.stderr
    assert drop.read_text().strip() == "0"
    assert "could NOT drop the page cache" in proc.stdout
    assert json.loads(record.read_text())["before_kb"] == 61440000


def test_it_writes_the_containers_cap_memtotal_less_the_reserve(tmp_path):
    cap_file = tmp_path / "container-memory.env"
    proc, drop, record = _run(tmp_path, cap=("8000000", str(cap_file), CONTAINER_MEMORY_VAR))
    assert proc.returncode == 0, proc.stderr
    assert cap_file.read_text() == f"{CONTAINER_MEMORY_VAR}={127535000 - 8000000}k\n"
    assert "the container's memory cap: 116733 MiB (MemTotal 124545 MiB less the reserve 7812 MiB)" in proc.stdout
    assert drop.read_text().strip() == "3" and json.loads(record.read_text())["after_kb"] == 122880000


@pytest.mark.parametrize("reserve", ["127500000", "-5", "8G", "012"])
def test_a_cap_it_cannot_compute_fails_the_start_and_writes_none(tmp_path, reserve):
    cap_file = tmp_path / "container-memory.env"
    proc, _, _ = _run(tmp_path, cap=(reserve, str(cap_file), CONTAINER_MEMORY_VAR))
    assert proc.returncode == 1 and "drop-caches: no container cap: " in proc.stderr, (proc.stdout, proc.stderr)
    assert ("is not a number" in proc.stderr) == (reserve != "127500000"), proc.stderr
    assert not cap_file.exists()


def test_the_unit_runs_it_first_before_every_start_and_reads_the_cap_it_writes():
    s = _settings()
    unit = unit_text(s)
    first = exec_line(unit, "ExecStartPre", 0)
    # no `-`: the drop never fails a start (above), a missing cap does: the container never runs uncapped
    assert first == [f"{s.data_dir}/bin/drop-caches", f"{s.data_dir}/mem-at-start.json", "7812500",
                     f"{s.data_dir}/container-memory.env", CONTAINER_MEMORY_VAR]
    assert f"\nEnvironmentFile=-{s.data_dir}/container-memory.env\n" in unit  # `-`: its first start has none yet
    assert exec_line(unit, "ExecStart")[2:4] == [f"--memory={EXPANDED}", f"--memory-swap={EXPANDED}"]


def test_plan_shows_the_cap_the_script_computes(tmp_path):
    """`plan`'s `container capped at` (memory.Fit.cap) is the arithmetic drop-caches does with the unit's arguments."""
    s = _settings()
    pre, _ = memory_cap_args(s)
    cap_file = tmp_path / "container-memory.env"
    proc, _, _ = _run(tmp_path, cap=(pre[2], str(cap_file), CONTAINER_MEMORY_VAR))
    assert proc.returncode == 0, proc.stderr
    written_kb = int(cap_file.read_text().split("=", 1)[1].rstrip("k\n"))
    assert written_kb * 1024 == memory.fit(s, {}).cap(127535000 * 1024)
