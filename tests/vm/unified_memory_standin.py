"""STAND-IN for a GB10's GPU allocations (tests/vm/test_memory_oom.py, case c): memory the serving process takes from
the one pool without it being charged to the container's cgroup, and which goes when that process does. Run in the
guest as root, as a transient systemd unit:

    python3 unified_memory_standin.py TARGET_KIB NAME

The trtllm-serve stand-in holds an empty memfd for its life (trtllm_serve.py, hold_device_memory; NAME is its
DEVICE_MEMORY, given by the test). This finds it (/proc/*/fd), and until MemAvailable is at or below TARGET_KIB it takes a copy of that fd (pidfd_getfd), allocates
the next 8 MiB of the file through it (the pages are charged to this process's cgroup, not the container's) and
closes it at once. So this holds no reference of its own between pieces: the pages belong to the server's open
file, and the kernel frees them while the server's process ends, before it is reaped, as the driver frees a dead
process's allocations. Nothing here has to notice the server's death in time: a mechanism, not a race. This process
is never an OOM killer's choice (oom_score_adj -1000): what runs out of memory is the server's, not the stand-in's.
It then waits for the server's process to end (its pidfd) and says what MemAvailable is afterwards."""

from __future__ import annotations

import ctypes
import os
import select
import sys

CHUNK = 8 << 20
SYS_PIDFD_GETFD = 438  # the same number on x86_64 and aarch64 (Linux 5.6+)
LIBC = ctypes.CDLL(None, use_errno=True)


def available_kib() -> int:
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    raise SystemExit("unified-memory stand-in: no MemAvailable in /proc/meminfo")


def find_device_memory(name: str, pids=None) -> tuple[int, int]:
    """(pid, fd number) of the process holding the memfd `name`: the trtllm-serve stand-in (the host's one; `pids`:
    among these only, where other hosts' stand-ins are visible too, as on a machine running container hosts)."""
    link = f"/memfd:{name}"  # as /proc/PID/fd shows it, with " (deleted)" after
    for pid in map(str, pids) if pids is not None else filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(link):
                    return int(pid), int(fd)
        except OSError:  # gone meanwhile, or a kernel thread
            continue
    raise SystemExit(f"unified-memory stand-in: no process holds {link}")


def take(pidfd: int, fd: int, offset: int) -> bool:
    """Allocate the file's next piece through a copy of the server's fd, closed at once. False once the server is
    gone (pidfd_getfd fails: ESRCH)."""
    mine = LIBC.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
    if mine < 0:
        return False
    try:
        os.posix_fallocate(mine, offset, CHUNK)
    finally:
        os.close(mine)
    return True


def main() -> None:
    target, name = int(sys.argv[1]), sys.argv[2]
    with open("/proc/self/oom_score_adj", "w", encoding="ascii") as f:
        f.write("-1000")
    pid, fd = find_device_memory(name)
    pidfd = os.pidfd_open(pid)
    print(f"unified-memory stand-in: filling process {pid}'s device memory (fd {fd}) until MemAvailable <= "
          f"{target} kB", flush=True)
    size = 0
    while available_kib() > target and take(pidfd, fd, size):
        size += CHUNK
    print(f"unified-memory stand-in: process {pid} holds {size >> 20} MiB of device memory; MemAvailable "
          f"{available_kib()} kB (target {target} kB)", flush=True)
    select.select([pidfd], [], [])  # readable once the process has ended
    print(f"unified-memory stand-in: process {pid} ended: its {size >> 20} MiB went with it; MemAvailable "
          f"{available_kib()} kB", flush=True)


if __name__ == "__main__":
    main()
