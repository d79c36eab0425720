"""The lab's own docker engine (Debian's docker.io) and lxcfs, started and stopped by the lab, out of everybody's way:
its socket, data root, exec root, pid file and cgroup parent under the run's directory; no iptables rules, no IP
forwarding or masquerading, no default bridge (so nothing like docker0 is left behind); networks from an address
pool of its own, a /20 slot taken machine-wide (slots.py), so that two runs at once never share a subnet.
docker.service is never enabled or started.

Every container, network and volume the lab creates carries the label LABEL=<run id>; `stop` removes them, stops
dockerd and lxcfs, unmounts what the run mounted and deletes the run's directory. Its bridges are named for the
engine's slot (bridge_name): docker deletes a bridge only when its network is removed, so the ones a killed engine
left in the kernel (whose routes would shadow the next engine's on the same slot) are found by name and deleted, by
`stop` and by the next engine on that slot. `sweep` does the same for the runs
whose owner is gone (a SIGKILLed test run), and for all of them with `down --all`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ..errors import VMError
from ..local import read_pid, run, safe_rmtree
from . import cgroups, slots

log = logging.getLogger(__name__)

LABEL = "specfleet-lab.run"
DOCKERD = "/usr/sbin/dockerd"
LXCFS = "/usr/bin/lxcfs"
#: lxcfs' files mounted over a host's /proc, so that /proc/meminfo (earlyoom, the deploy's memory fit) shows the
#: host's memory limit, not the machine's
LXCFS_PROC = ("meminfo", "cpuinfo", "stat", "uptime", "loadavg", "swaps", "diskstats")


def bridge_name(slot: int, network: str) -> str:
    """The kernel name of a lab network's bridge (at most 15 characters): its engine's slot, then its network's."""
    return f"{_bridge_prefix(slot)}{hashlib.sha256(network.encode()).hexdigest()[:8]}"


def _bridge_prefix(slot: int) -> str:
    return f"sfl{slot:x}-"


def bridges(slot: int) -> list[str]:
    """The bridges of the lab's engine on `slot` in the kernel."""
    return sorted(p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith(_bridge_prefix(slot)))


def drop_bridges(slot: int) -> list[str]:
    """Delete the bridges left on `slot` (its engine is gone); those that stayed."""
    for name in bridges(slot):
        subprocess.run(["ip", "link", "delete", name], capture_output=True)
    return bridges(slot)


def docker_cli() -> str:
    """The docker client: Debian's (the engine's own version), else any on PATH (the API version is negotiated)."""
    return "/usr/bin/docker" if os.access("/usr/bin/docker", os.X_OK) else (shutil.which("docker") or "docker")


class Engine:
    """One run's dockerd + lxcfs, in `root` (its run id is the directory's name)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.run_id = self.root.name

    @property
    def slot(self) -> int | None:
        """The engine's address pool (slots.py), while it holds one."""
        held = slots.held_by(self.root)
        return int(held[0]) if held else None

    # -- where things are
    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.root / "dockerd.pid"

    @property
    def lxcfs_dir(self) -> Path:
        return self.root / "lxcfs"

    @property
    def owner_file(self) -> Path:
        return self.root / "owner.json"

    def lxcfs_mounts(self) -> list[str]:
        """`docker run` arguments that put lxcfs' view of the host's limits over its /proc files."""
        return [arg for name in LXCFS_PROC
                for arg in ("-v", f"{self.lxcfs_dir}/mnt/proc/{name}:/proc/{name}:rw")]

    # -- the docker CLI on this engine
    def docker(self, *args: str, check: bool = True, input: bytes | None = None, timeout: float = 600,
               stdin=None) -> subprocess.CompletedProcess:
        argv = [docker_cli(), "-H", f"unix://{self.socket}", *args]
        kw = {"input": input} if stdin is None else {"stdin": stdin}
        try:
            p = subprocess.run(argv, capture_output=True, timeout=timeout, **kw)
        except subprocess.TimeoutExpired as e:
            raise VMError(f"docker {' '.join(args[:2])} timed out after {timeout} s") from e
        if check and p.returncode != 0:
            raise VMError(f"docker {' '.join(args)} failed ({p.returncode}): "
                          f"{p.stderr.decode('utf-8', 'replace').strip()[-2000:]}")
        return p

    def alive(self) -> bool:
        pid = read_pid(self.pidfile)
        return bool(pid) and _is(pid, DOCKERD, str(self.socket))

    def network_create(self, name: str, *args: str) -> None:
        """A network of this run: its label, and its bridge named for the engine's slot."""
        self.docker("network", "create", "--label", f"{LABEL}={self.run_id}",
                    "-o", f"com.docker.network.bridge.name={bridge_name(self.slot, name)}", *args, name)

    def remove_labelled(self, label: str) -> None:
        """Remove the containers (with their anonymous volumes), volumes and networks that carry `label`
        (key=value)."""
        for _kind, listing, rm in (("container", ("ps", "-aq"), ("rm", "-f", "-v")), ("volume", ("volume", "ls", "-q"),
                                  ("volume", "rm")), ("network", ("network", "ls", "-q"), ("network", "rm"))):
            found = self.docker(*listing, "--filter", f"label={label}", check=False).stdout.split()
            if found:
                self.docker(*rm, *[f.decode() for f in found], check=False, timeout=300)

    # -- lifecycle
    def start(self, owner: str) -> None:
        """Start lxcfs and dockerd for this run (`owner`: who stops it: `session:<pid>` or `fleet:<workdir>`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.owner_file.write_text(json.dumps({"owner": owner, "pid": os.getpid(), "started": time.time()}) + "\n")
        slot = slots.take(self.root)
        stale = drop_bridges(slot)  # the slot was free: what is named for it is a dead engine's
        if stale:
            raise VMError(f"bridges of a stopped lab engine could not be deleted: {', '.join(stale)}")
        self._start_lxcfs()
        argv = [DOCKERD, "--iptables=false", "--ip6tables=false", "--ip-forward=false", "--ip-masq=false",
                "--bridge=none", "-H", f"unix://{self.socket}", "--data-root", str(self.root / "data"),
                "--exec-root", str(self.root / "exec"), "--pidfile", str(self.pidfile),
                "--default-address-pool", f"base={slots.pool(slot)},size=24",
                "--cgroup-parent", cgroups.parent(self.run_id), "--storage-driver", "overlay2",
                "--log-level", "warn"]
        with open(self.root / "dockerd.log", "ab") as out:
            subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = time.monotonic() + 60
        while self.docker("version", check=False, timeout=10).returncode != 0:
            if time.monotonic() > deadline:
                raise VMError(f"the lab's dockerd did not answer on {self.socket} within 60 s:\n"
                              + (self.root / "dockerd.log").read_text(errors="replace")[-2000:])
            time.sleep(0.2)
        log.info("lab engine %s: dockerd pid %s, pool %s", self.run_id, read_pid(self.pidfile), slots.pool(slot))

    def _start_lxcfs(self) -> None:
        """lxcfs -u: without swap virtualisation (lxcfs 5.0.3 at times served a wrapped SwapFree, on which earlyoom
        exits: lxc/lxcfs#695)."""
        mnt = self.lxcfs_dir / "mnt"
        mnt.mkdir(parents=True, exist_ok=True)
        pidfile = self.lxcfs_dir / "lxcfs.pid"
        subprocess.Popen([LXCFS, "-f", "-l", "-u", "-p", str(pidfile), str(mnt)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while not (mnt / "proc" / "meminfo").exists():
            if time.monotonic() > deadline:
                raise VMError(f"lxcfs did not mount {mnt} within 30 s")
            time.sleep(0.1)

    def stop(self) -> list[str]:
        """Remove everything of this run (containers, networks, volumes, mounts, cgroups, processes, the directory);
        what could not be removed, one line each."""
        left: list[str] = []
        slot = self.slot
        if self.alive():
            self.remove_labelled(f"{LABEL}={self.run_id}")
        _kill(read_pid(self.pidfile), DOCKERD, str(self.socket), 30)
        _kill(read_pid(self.lxcfs_dir / "lxcfs.pid"), LXCFS, str(self.lxcfs_dir), 10)
        _kill_naming(self.root)  # a dead dockerd's containerd and shims
        left += cgroups.remove(self.run_id)  # and its hosts
        if slot is not None:
            left += [f"bridge {b}" for b in drop_bridges(slot)]
        slots.release(self.root)
        try:  # unmounts first what is mounted below it: loop-mounted data dirs, lxcfs' FUSE mount, dockerd's
            safe_rmtree(self.root)
        except VMError as e:
            left.append(str(e))
        return left


    def leftovers(self) -> list[str]:
        """What of this run is still on the machine: its dockerd and lxcfs, its directory, mounts, cgroups and slot
        (none once `stop` ran)."""
        left = [f"{what} pid {pid}" for what, pid, program, needle in (
            ("dockerd", read_pid(self.pidfile), DOCKERD, str(self.socket)),
            ("lxcfs", read_pid(self.lxcfs_dir / "lxcfs.pid"), LXCFS, str(self.lxcfs_dir))) if pid and
            _is(pid, program, needle)]
        mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if line.split()[4].startswith(str(self.root))]
        left += [f"mount {m}" for m in mounts] + cgroups.leftovers(self.run_id)
        left += [f"slot {s}" for s in slots.held_by(self.root)]
        slot = self.slot
        left += [f"bridge {b}" for b in (bridges(slot) if slot is not None else ())]
        return left + ([str(self.root)] if self.root.exists() else [])


def _is(pid: int, program: str, needle: str) -> bool:
    """Whether `pid` is a live `program` whose command line holds `needle` (a recycled pid never is)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and argv[0].decode() == program and any(needle.encode() in a for a in argv)


def _kill(pid: int | None, program: str, needle: str, wait: float) -> None:
    if not pid or not _is(pid, program, needle):
        return
    for sig, seconds in ((signal.SIGTERM, wait), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and _is(pid, program, needle):
            time.sleep(0.1)
        if not _is(pid, program, needle):
            return


def _kill_naming(root: Path) -> None:
    """SIGKILL every process whose command line names `root` (none is ours)."""
    needle = str(root).encode()
    for p in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if p.name.isdigit() and int(p.name) != os.getpid() and needle in (p / "cmdline").read_bytes():
                os.kill(int(p.name), signal.SIGKILL)


def mkfs_data_disk(path: Path, size: str) -> None:
    """A sparse ext4 file of `size` (the QEMU disk's): a host's data directory, so that a full disk fills the host,
    never the machine."""
    run(["truncate", "-s", size, path])
    run(["mkfs.ext4", "-q", "-F", "-L", "specfleet-data", path], capture_output=True)
