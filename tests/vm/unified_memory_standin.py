"""STAND-IN for a GB10's GPU allocations (tests/vm/test_memory_oom.py, case c): memory the serving process takes from
the one pool without it being charged to the container's cgroup. On a GB10 the driver allocates it for the server and
frees it when the server's process ends; here a root process outside the container takes it, run in the guest as a
transient systemd unit, for as long as the process it stands for lives.

    python3 unified_memory_standin.py TARGET_KIB PID

It takes memory in 8 MiB pieces, each written (so the pages are taken, not only reserved), until MemAvailable is at or
below TARGET_KIB, and holds it while PID lives (the serving container's init: the container ends with its server).
When PID is gone it says so and exits, which frees everything, as the driver frees a dead process's allocations."""

from __future__ import annotations

import os
import sys
import time

CHUNK = 8 << 20


def available_kib() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise SystemExit("unified-memory stand-in: no MemAvailable in /proc/meminfo")


def main() -> None:
    target, pid = int(sys.argv[1]), int(sys.argv[2])
    held = []
    while os.path.exists(f"/proc/{pid}") and available_kib() > target:
        held.append(b"\x01" * CHUNK)
        time.sleep(0.02)
    print(f"unified-memory stand-in: holding {len(held) * CHUNK >> 20} MiB for process {pid}; MemAvailable "
          f"{available_kib()} kB (target {target} kB)", flush=True)
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    print(f"unified-memory stand-in: process {pid} ended: its {len(held) * CHUNK >> 20} MiB are freed", flush=True)


if __name__ == "__main__":
    main()
