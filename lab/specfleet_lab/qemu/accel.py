"""How guests are run: the accelerator (TCG, or KVM once a probe boot proved it works here; the verdict is
cached) and the vCPUs per guest."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path

from ..arch import DEFAULT_ARCH, host_arch, parse_arch, qemu_binary
from ..host import OPERATOR
from ..image import ImageInfo
from ..local import default_cache_dir, free_port, resolve, run, tail
from .guest import QemuHost, qemu_argv

log = logging.getLogger(__name__)

KVM_PROBE_TIMEOUT = 25.0


def default_smp(count: int, arch: str = DEFAULT_ARCH) -> int:
    """vCPUs per guest: host cores // guests, at least 1, at most 2.

    Measured on the 2-core CI machine under TCG, boot until SSH answers and
    `systemctl is-system-running --wait` returns:
      1 guest:  -smp 2 35 s, -smp 1 50 s
      2 guests: -smp 1 49 s, -smp 2 70 s
      3 guests: -smp 1 81 s, -smp 2 93 s
    More vCPU threads than host cores only add contention (MTTCG pays for cross-vCPU
    IPIs, TLB flushes and atomics); one guest on two cores does use both.
    The same rule holds for arm64 guests (always TCG on an x86 host): an emulated aarch64
    vCPU is one host thread like an x86 one, and oversubscribing the host costs the same.
    Override with SPECFLEET_VM_SMP or up(smp=...).
    """
    parse_arch(arch)
    env = os.environ.get("SPECFLEET_VM_SMP")
    if env:
        return max(1, int(env))
    host = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(2, (host or 1) // max(1, count)))


def _qemu_version(arch: str = DEFAULT_ARCH) -> str:
    out = run([qemu_binary(arch), "--version"], capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else "?"


def choose_accel(image: ImageInfo, cache_dir=None) -> str:
    """'tcg' or 'kvm'. KVM only if a probe boot proved it works on this host (cached). A guest of
    another architecture than the host's (arm64 on x86_64) is always TCG: there is nothing to probe."""
    if image.arch != host_arch():
        return "tcg"
    forced = (os.environ.get("SPECFLEET_VM_ACCEL") or "auto").lower()
    if forced in ("tcg", "kvm"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    cache = resolve(cache_dir, default_cache_dir)
    verdict_file = cache / "kvm-probe.json"
    key = {"qemu": _qemu_version(image.arch), "host_kernel": os.uname().release,
           "recipe_hash": image.recipe_hash}
    with contextlib.suppress(OSError, ValueError):
        v = json.loads(verdict_file.read_text())
        if v.get("key") == key:
            log.info("KVM probe (cached): %s", "works" if v["kvm_works"] else "fails -> TCG")
            return "kvm" if v["kvm_works"] else "tcg"
    t0 = time.monotonic()
    ok, why = _probe_kvm(image, cache)
    seconds = time.monotonic() - t0
    log.info("KVM probe: %s in %.1f s (%s)", "works" if ok else "fails -> TCG", seconds, why)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = verdict_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "kvm_works": ok, "reason": why,
                               "probe_seconds": round(seconds, 1)}, indent=2) + "\n")
    os.replace(tmp, verdict_file)
    return "kvm" if ok else "tcg"


def _probe_kvm(image: ImageInfo, cache: Path) -> tuple[bool, str]:
    """Boot the image under KVM for at most KVM_PROBE_TIMEOUT seconds; works == SSH answers."""
    with tempfile.TemporaryDirectory(prefix="kvm-probe-", dir=cache) as td:
        td = Path(td)
        overlay = td / "probe.qcow2"
        run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", image.disk, "-F", "raw",
             overlay], capture_output=True)
        port = free_port()
        guest = QemuHost(name="kvm-probe", key_path=image.key, ssh_port=port, overlay=overlay, pidfile=td / "probe.pid",
                         console_log=td / "console.log", arch=image.arch)
        argv = qemu_argv(guest, image.kernel, image.initrd, memory_mb=1024, smp=1,
                         accel="kvm", hostname="kvm-probe", daemonize=False)
        with open(td / "stderr.log", "wb") as errf:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=errf, stderr=errf,
                                    start_new_session=True)
            try:
                return _watch_probe(proc, guest, td)
            finally:
                proc.kill()
                proc.wait()


def _watch_probe(proc: subprocess.Popen, guest: QemuHost, td: Path) -> tuple[bool, str]:
    """The probe guest's verdict: SSH answered, or why not (QEMU exited, a KVM error, a silent console, time)."""
    started = time.monotonic()
    deadline = started + KVM_PROBE_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False, f"qemu exited {proc.returncode}: {tail(td / 'stderr.log', 3)}"
        err = (td / "stderr.log").read_bytes()
        if b"KVM internal error" in err or b"emulation failure" in err:
            return False, "KVM internal error (emulation failure)"
        console = td / "console.log"
        if time.monotonic() - started > 10 and (
                not console.exists() or console.stat().st_size == 0):
            return False, "guest printed nothing on its console within 10 s (hung)"
        r = guest.ssh("true", check=False, timeout=5, connect_timeout=3, user=OPERATOR)
        if r.returncode == 0:
            return True, "guest answered SSH"
        time.sleep(0.5)
    return False, f"no SSH within {KVM_PROBE_TIMEOUT:.0f} s"
