"""Memory that reads right on a Spark. On a GB10, NVML's memory queries are NOT_SUPPORTED and
`nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits` prints `[N/A]` (spark-memory.md: leptonai/gpud
PR #1170, the vllm playbook), so `status` (host/probes/overview.memory) and `bench` (host/bench_load.memory_in_use)
fall back to MemTotal - MemAvailable. Each reading runs with a stand-in nvidia-smi first on PATH and a stand-in
/proc/meminfo; on a discrete GPU (digits) nvidia-smi's figure is kept."""

from __future__ import annotations

import builtins
import io
import os

import pytest

from specfleet.bench.host import bench_load
from specfleet.overview.host import overview
from specfleet.overview.report import gate_memory, rows, table

MEMINFO = "MemTotal:       127535000 kB\nMemFree:         1000000 kB\nMemAvailable:    52535000 kB\n"
USED = (127535000 - 52535000) * 1024  # MemTotal - MemAvailable, bytes


@pytest.fixture
def spark(tmp_path, monkeypatch):
    """A stand-in nvidia-smi on PATH (prints what `answer` says) and /proc/meminfo read from MEMINFO."""
    def install(answer: str):
        tool = tmp_path / "nvidia-smi"
        tool.write_text(f"#!/bin/sh\nprintf '%s\\n' '{answer}'\n")
        tool.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        return io.StringIO(MEMINFO) if path == "/proc/meminfo" else real_open(path, *args, **kwargs)

    for module in (overview, bench_load):
        monkeypatch.setattr(module, "open", fake_open, raising=False)  # the module's `open` before builtins'
    return install


def test_status_reads_a_gb10s_memory_from_meminfo_when_nvidia_smi_prints_na(spark):
    spark("[N/A]")
    assert overview.memory() == {"source": "meminfo", "used_bytes": USED, "available_bytes": 52535000 * 1024}


def test_bench_reads_a_gb10s_memory_from_meminfo_when_nvidia_smi_prints_na(spark):
    spark("[N/A]")
    assert bench_load.memory_in_use() == {"host_bytes": USED}


def test_a_discrete_gpus_figure_is_kept(spark):
    spark("4096")
    assert overview.memory()["source"] == "nvidia-smi" and overview.memory()["used_bytes"] == 4096 * 1048576
    assert bench_load.memory_in_use() == {"gpu_bytes": 4096 * 1048576, "host_bytes": USED}


def test_status_and_releases_show_the_gates_memory_figures():
    """The passed gate's MemAvailable at the start (after the page cache was dropped) and once
    loaded, in `status`'s table (and `releases`' line: cli/rollout.py uses the same gate_memory)."""
    gate = {"release": "r-aaaaaaaaaaaa", "result": "passed", "mem_available_at_start_mib": 119000,
            "mem_available_loaded_mib": 50100}
    assert gate_memory(gate) == "124.8G->52.5G" and gate_memory({"result": "passed"}) is None
    found = {"spark-01": {"release": "r-aaaaaaaaaaaa", "unit": "active", "health": 200, "gate": gate}}
    [header, row] = table(rows(["spark-01"], found))
    column = header.index("avail start->loaded")
    assert row[column:].startswith("124.8G->52.5G"), (header, row)
