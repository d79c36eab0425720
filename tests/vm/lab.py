"""The CI lab: a VM fleet + the Hub stand-in + the trtllm-serve stand-in image, and the CI inventory.

The CI inventory differs from a production one ONLY in the vars of `ci_vars()` (documented in
docs/dev/ci.md); everything else is what `specfleet-lab up` writes (connection vars) plus normal inventory data.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import resource
import shlex
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from tests.vm.hub_standin import STANDIN_TIKTOKEN_SHA256, STANDIN_TOKEN
from tests.vm.trtllm_standin import image as standin_image

ROOT = Path(__file__).resolve().parents[2]
STANDIN_REPO = "specfleet-standin/trtllm-serve"
STANDIN_TAG = f"{STANDIN_REPO}:1.2.0rc6-standin"
#: The vLLM STAND-IN image (`vllm serve` of vLLM 0.20.1 stood in by tests/vm/vllm_standin/vllm_serve.py), derived in
#: the guests from the trtllm-serve stand-in image (make_vllm_standin_in_guests); a test sets it as `vllm_image`.
VLLM_STANDIN_TAG = "specfleet-standin/vllm:0.20.1-standin"
VLLM_STANDIN_SCRIPT = Path(__file__).with_name("vllm_standin") / "vllm_serve.py"
#: The share of memory the lab's vLLM Sparks ask (`vllm_gpu_memory_utilization`, a test's var beside `vllm_image`):
#: the guests have 2 GiB, so the default 0.8 is more than the memory fit allows with memory_reserve_gb 0.5 (at most
#: 0.75), and vLLM asks its share of MemTotal free at start-up (what the stand-in checks, vllm_serve.memory_check).
VLLM_LAB_SHARE = 0.4


def ci_vars(hub_port: int, controller: str, image: str = STANDIN_TAG, bind: str = "127.0.0.1") -> dict:
    """The complete list of inventory vars in which the lab's fleet differs from real Sparks (at most 7, each
    justified in docs/dev/ci.md; tests/lab/test_ci_vars.py keeps both in step). gpus and
    the timing vars keep their defaults: the guests carry a stand-in NVIDIA container toolkit, and the
    stand-in server loads in seconds. A failure test that needs another value sets it with with_vars().
    `controller`: the controller's address as the hosts see it (Fleet.controller_address); `bind`: where the
    controller's stand-ins listen (the driver's bind address), as the controller itself reaches them."""
    return {
        "image": image,  # the trtllm-serve stand-in image (loaded into each guest, no registry)
        "hub_endpoint": f"http://{controller}:{hub_port}",  # the Hub stand-in, as the hosts reach it
        "controller_hub_endpoint": f"http://{bind}:{hub_port}",  # the same server, as the controller reaches it
        "tiktoken_base_url": f"http://{controller}:{hub_port}/encodings",  # stand-in encodings
        "tiktoken_sha256": dict(STANDIN_TIKTOKEN_SHA256),  # and their hashes
        "disk_headroom_gb": 1,  # the guests' disks are 6 GB (specfleet_lab.DISK_SIZE), not a Spark's 4 TB
        "memory_reserve_gb": 0.5,  # the guests have 2 GiB of memory (specfleet_lab.up), not a Spark's 128 GB
    }


def write_ci_inventory(fleet, hub_port: int, out: Path, image: str = STANDIN_TAG) -> Path:
    """The fleet's inventory with ci_vars() and its operator account, locked."""
    inv = yaml.safe_load(fleet.inventory_path.read_text())
    inv["all"].setdefault("vars", {}).update(ci_vars(hub_port, fleet.controller_address, image,
                                                     fleet.driver.bind_address))
    inv["all"]["vars"]["operator_users"] = ["spark"]  # ordinary fleet data: the guests' operator account
    out.write_text("# CI inventory: written by tests/vm/lab.py from the VM fleet's inventory + ci_vars()\n"
                   + yaml.safe_dump(inv, sort_keys=False))
    return write_lock(out)


def write_lock(inventory: Path) -> Path:
    """`specfleet lock inventory.py` for this fleet file, as a user runs it (the Hub stand-in must be up): writes
    `<inventory>.lock` next to it. The stand-in image is in no registry: its digest is recorded as null."""
    proc = run_specfleet("lock", "inventory.py", inventory=inventory, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"specfleet lock failed (rc={proc.returncode}): {proc.stderr[-2000:]}")
    return inventory


def trust_controller_cas(fleet, ca_dir: Path = Path("/usr/local/share/ca-certificates")) -> int:
    """Prepare: give the guests the extra CAs the controller trusts (e.g. a TLS-intercepting egress proxy
    in front of PyPI), as a corporate network would; the deploy installs huggingface_hub from PyPI."""
    cas = sorted(ca_dir.glob("*.crt"))
    if not cas:
        return 0
    # What update-ca-certificates leaves for these CAs (a PEM link, a hash link for OpenSSL's directory lookup, the
    # CA in the bundle), without it: it rebuilds the whole bundle with a process per certificate, 30 s per guest
    # under TCG. Hashes are computed here; a later update-ca-certificates in a guest yields the same result.
    hashes = {ca.name: subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(ca)], capture_output=True,
                                      text=True, check=True).stdout.strip() for ca in cas}

    def one(g):
        script = ["set -e", "cd /etc/ssl/certs"]
        for ca in cas:
            g.put(ca, f"/usr/local/share/ca-certificates/{ca.name}")
            src, pem = f"/usr/local/share/ca-certificates/{ca.name}", ca.name.removesuffix(".crt") + ".pem"
            script += [f"ln -sf {shlex.quote(src)} {shlex.quote(pem)}",
                       f"i=0; while [ -e {hashes[ca.name]}.$i ] && [ \"$(readlink {hashes[ca.name]}.$i)\" != "
                       f"{shlex.quote(pem)} ]; do i=$((i+1)); done; ln -sf {shlex.quote(pem)} {hashes[ca.name]}.$i",
                       f"grep -qxF \"$(sed -n 2p {shlex.quote(src)})\" ca-certificates.crt || "
                       f"{{ cat {shlex.quote(src)}; echo; }} >> ca-certificates.crt"]
        g.ssh("\n".join(script) + "\nprintf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n' > /etc/pip.conf")
        return 0.0

    fleet._parallel(one)
    return len(cas)


GUEST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def guest_pip_conf(index_url: str | None = None, cert: str | None = None) -> str:
    """The guests' /etc/pip.conf: the lab's PyPI mirror (the controller's wheelhouse, tests/vm/wheelhouse.py;
    plain HTTP on the QEMU user network, hence trusted-host) and/or the CA bundle with the controller's CAs."""
    lines = ["[global]"]
    if index_url:
        lines += [f"index-url = {index_url}", f"trusted-host = {urlsplit(index_url).hostname}"]
    if cert:
        lines.append(f"cert = {cert}")
    return "\n".join(lines) + "\n"


def configure_guest_pip(fleet, index_url: str | None, cert: bool, guests=None) -> list[str]:
    """Prepare: point the guests' pip at the lab's PyPI mirror, as a corporate network's /etc/pip.conf does
    (not an inventory key: the deploy's pip install is unchanged). Call after trust_controller_cas (`cert`:
    it installed CAs; the file keeps its `cert =` line). No index_url and no cert: nothing is written."""
    if not index_url and not cert:
        return []
    text = guest_pip_conf(index_url, GUEST_CA_BUNDLE if cert else None).encode()
    guests = list(fleet.guests if guests is None else guests)
    if guests:
        fleet._parallel(lambda g: g.ssh("umask 022 && cat > /etc/pip.conf.specfleet-tmp && "
                                        "mv -f /etc/pip.conf.specfleet-tmp /etc/pip.conf", input=text), guests)
    return [g.name for g in guests]


def standin_tarball(cache_dir: Path, arch: str = "x86_64", mode: str = "ok", load_delay_s: float = 4.0,
                    version: str = "1.2.0rc6", pair: bool = False) -> Path:
    """The stand-in rootfs tar for guests of `arch` (a guest's arch: x86_64/arm64), built unless cached. `pair`:
    a two-Spark pair's (OpenMPI, an SSH client, mpi4py)."""
    return standin_image.build_rootfs_tarball(cache_dir, mode=mode, load_delay_s=load_delay_s, version=version,
                                              arch=standin_image.debian_arch(arch), pair=pair)


def load_standin_image(fleet, cache_dir: Path, mode: str = "ok", load_delay_s: float = 4.0, tag: str = STANDIN_TAG,
                       guests=None, version: str = "1.2.0rc6", pair: bool = False) -> dict:
    """Build (per guest architecture) and stream the stand-in image into every guest (or `guests`)."""
    guests = list(fleet.guests if guests is None else guests)
    by_arch: dict[str, list] = {}
    for g in guests:
        by_arch.setdefault(getattr(g, "arch", None) or "x86_64", []).append(g)
    seconds: dict = {}
    for arch, members in by_arch.items():
        tarball = standin_tarball(cache_dir, arch, mode=mode, load_delay_s=load_delay_s, version=version, pair=pair)
        seconds.update(fleet.load_image(tarball, tag, standin_image.docker_import_changes(), guests=members))
    return seconds


@dataclass
class PyinfraRun:
    deploy: str
    returncode: int
    seconds: float
    stdout: str
    stderr: str
    result: dict | None = None
    changed: dict[str, list[str]] = field(default_factory=dict)  # host -> names of ops that changed something
    cpu: float = 0.0  # controller CPU seconds of the pyinfra process (user + system)
    failed: list[str] = field(default_factory=list)

    @property
    def n_changed(self) -> int:
        return sum(len(v) for v in self.changed.values())

    def output(self) -> str:
        return self.stdout + self.stderr


def run_pyinfra(inventory: Path, deploy: str, *extra: str, json_out: bool = True, timeout: float = 2400,
                env: dict | None = None) -> PyinfraRun:
    """`pyinfra -y inventory.py deploys/<deploy>.py` as a user runs it (a subprocess in the project dir)."""
    target = ["exec", "--", "true"] if deploy == "exec true" else [f"deploys/{deploy}.py"]
    cmd = [sys.executable, "-m", "pyinfra", "-y", *(["--json"] if json_out else []), *extra, "inventory.py", *target]
    full_env = {**os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": STANDIN_TOKEN,
                "PYINFRA_PROGRESS": "off", **(env or {})}
    start, cpu = time.monotonic(), _children_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
    run = PyinfraRun(deploy, proc.returncode, time.monotonic() - start, proc.stdout, proc.stderr)
    run.cpu = _children_cpu() - cpu
    if json_out:
        start_json = proc.stdout.find("{")
        if start_json >= 0:
            try:
                run.result = json.loads(proc.stdout[start_json:])
            except ValueError:
                run.result = None
        if run.result:
            names = {op["op_hash"]: " | ".join(op["names"]) for op in run.result["results"]["operations"]}
            for op in run.result["results"]["operations"]:
                for h in op["success"]:
                    run.changed.setdefault(h, []).append(names[op["op_hash"]])
            run.failed = list(run.result["results"].get("failed_hosts") or [])
    sys.stderr.write(f"\n=== pyinfra {deploy}: rc={run.returncode} in {run.seconds:.1f}s ===\n{proc.stderr[-6000:]}\n")
    return run


class Background:
    """A `pyinfra -y inventory.py deploys/<deploy>.py` running in the background in its own process group (so a
    test can SIGKILL the whole controller), its merged output collected line by line as it comes."""

    def __init__(self, inventory: Path, deploy: str, *extra: str, env: dict | None = None):
        cmd = [sys.executable, "-m", "pyinfra", "-y", *extra, "inventory.py", f"deploys/{deploy}.py"]
        full_env = {**os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": STANDIN_TOKEN,
                    "PYINFRA_PROGRESS": "off", **(env or {})}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True)
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    @property
    def returncode(self):
        return self.proc.returncode

    def wait(self, timeout: float | None = None) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        sys.stderr.write(f"\n=== background pyinfra: rc={rc} ===\n{self.output()[-6000:]}\n")
        return rc

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output(), ""


def start_pyinfra(inventory: Path, deploy: str, *extra: str, env: dict | None = None) -> Background:
    return Background(inventory, deploy, *extra, env=env)


def guest_release_json(guest) -> str:
    return guest.ssh("cat /var/lib/specfleet/current/release.json", check=False).stdout or "{}"


def guest_curl_completion(guest, port: int = 8000, model: str = "openai/gpt-oss-120b", prompt: str = "Say hello.") -> dict:
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 32})
    out = guest.ssh(f"curl -fsS -m 30 http://127.0.0.1:{port}/v1/completions -H 'Content-Type: application/json' "
                    f"-d '{body}'").stdout
    return json.loads(out)


def run_infra_suite(inventory: Path, junit: Path | None = None, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The testinfra suite (tests/infra) against an inventory, exactly as a user runs it on real Sparks."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/infra", *extra]
    if junit:
        cmd.append(f"--junitxml={junit}")
    env = {**os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": STANDIN_TOKEN}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    sys.stderr.write(f"\n=== testinfra suite: rc={proc.returncode} ===\n{proc.stdout[-5000:]}\n{proc.stderr[-2000:]}\n")
    return proc


def make_variant_in_guests(fleet, mode: str, tag: str, load_delay_s: float = 4.0) -> None:
    """A stand-in release with another behaviour (e.g. `crash`), derived in each guest from the loaded
    stand-in image with docker create/cp/commit (only the small behaviour file differs)."""
    config = standin_image.variant_config_json(mode, load_delay_s)

    def one(g):
        g.ssh(f"docker rm -f sf-variant >/dev/null 2>&1; docker create --name sf-variant {STANDIN_TAG} true >/dev/null && "
              f"cat > /tmp/trtllm-standin.json && docker cp /tmp/trtllm-standin.json sf-variant:/etc/trtllm-standin.json && "
              f"docker commit sf-variant {tag} >/dev/null && docker rm sf-variant >/dev/null", input=config.encode())

    with ThreadPoolExecutor(len(fleet.guests)) as pool:  # the guests at once (each its own emulated CPU)
        list(pool.map(one, fleet.guests))  # list(): a guest's failure raises here


def _vllm_standin_tar() -> bytes:
    """What the vLLM STAND-IN image adds to the trtllm-serve stand-in's files, as a tar rooted at /: the stand-in script
    as /usr/local/bin/vllm (0755) and its STAND-IN `vllm` package (tests/vm/vllm_standin/pylib: the names the release
    step's in-image check imports, specfleet/engines/host/validate_vllm_args.py) on the image's python3 path. The
    stand-ins' shared modules (tests/vm/standin_common) are there already, from the trtllm-serve stand-in's image."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(data: bytes, name: str, mode: int) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
        add(VLLM_STANDIN_SCRIPT.read_bytes(), "usr/local/bin/vllm", 0o755)
        pylib = VLLM_STANDIN_SCRIPT.parent / "pylib"
        for path in sorted(pylib.rglob("*.py")):
            add(path.read_bytes(), "usr/lib/python3/dist-packages/" + path.relative_to(pylib).as_posix(), 0o644)
    return buf.getvalue()


def make_vllm_standin_in_guests(fleet, tag: str = VLLM_STANDIN_TAG, guests=None) -> dict[str, float]:
    """The vLLM STAND-IN image in each guest (or `guests`), derived from the loaded trtllm-serve stand-in image (it
    has python3; load_standin_image first) with docker create/cp/commit (_vllm_standin_tar), so that the unit's
    `docker run IMAGE vllm serve ...` runs the stand-in and the release step's check imports its package. Seconds per
    guest."""
    files = _vllm_standin_tar()

    def one(g) -> float:
        start = time.monotonic()
        g.ssh(f"set -e; docker rm -f sf-vllm-standin >/dev/null 2>&1 || true; "
              f"docker create --name sf-vllm-standin {STANDIN_TAG} true >/dev/null; "
              f"docker cp - sf-vllm-standin:/; "
              f"docker commit --change 'LABEL org.opencontainers.image.description=\"vllm serve 0.20.1 STAND-IN "
              f"(tests/vm/vllm_standin)\"' sf-vllm-standin {tag} >/dev/null; "
              f"docker rm sf-vllm-standin >/dev/null; "
              f"docker run --rm --entrypoint sh {tag} -c 'test -x /usr/local/bin/vllm && "
              f"vllm serve --help >/dev/null && python3 -c \"import vllm.entrypoints.openai.cli_args\"'", input=files)
        return time.monotonic() - start

    guests = list(fleet.guests if guests is None else guests)
    with ThreadPoolExecutor(len(guests)) as pool:  # the guests at once
        return dict(zip((g.name for g in guests), pool.map(one, guests), strict=True))


def with_vars(inventory: Path, out: Path, *, lock: bool = True, **vars) -> Path:
    """A copy of an inventory with some all-level vars changed (a new release for a rollout), locked: the copy's
    lock starts from the original's (same pins) and `specfleet lock` adds what the changed vars need. `lock=False`:
    the original's lock as it is (for vars that `specfleet lock` refuses)."""
    inv = yaml.safe_load(inventory.read_text())
    inv["all"]["vars"].update(vars)
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    source_lock = Path(f"{inventory}.lock")
    if source_lock.exists():
        Path(f"{out}.lock").write_text(source_lock.read_text())
    return write_lock(out) if lock else out


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the finished (waited-for) children of this process
    return usage.ru_utime + usage.ru_stime


def run_specfleet(*args: str, inventory: Path, timeout: float = 2400, background: bool = False):
    cmd = [sys.executable, "-m", "specfleet", *args]
    env = {**os.environ, "SPECFLEET_INVENTORY": str(inventory), "HF_TOKEN": STANDIN_TOKEN}
    if background:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(f"\n=== specfleet {' '.join(args)}: rc={proc.returncode} in {time.monotonic() - start:.1f}s ===\n"
                     f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n")
    return proc


POLLER = Path(__file__).with_name("poll_completions.sh")
MAX_POLL_GAP = 30.0  # s: a host whose poller went quiet longer than this is unobserved, and the check fails


@dataclass(frozen=True)
class Poll:
    start: float
    end: float
    rc: int  # curl's exit code: 0 answered


def start_pollers(fleet) -> None:
    for g in fleet.guests:
        g.put(POLLER, "/tmp/specfleet-poll.sh")
        g.ssh("nohup sh /tmp/specfleet-poll.sh > /tmp/specfleet-poll.log 2>&1 & echo $! > /tmp/specfleet-poll.pid")


def stop_pollers(fleet) -> dict[str, list[Poll]]:
    out = {}
    for g in fleet.guests:
        g.ssh("kill $(cat /tmp/specfleet-poll.pid) 2>/dev/null; true", check=False)
        lines = g.ssh("cat /tmp/specfleet-poll.log", check=False).stdout.splitlines()
        out[g.name] = [Poll(float(s), float(e), int(r)) for s, e, r in
                       (line.split() for line in lines if len(line.split()) == 3)]
    return out


def availability_per_second(polls: dict[str, list[Poll]], start: float, end: float) -> list[int]:
    """For every second of [start, end]: how many hosts were serving, by their latest finished poll (answered or
    not). A host's state changes only on a poll that ran: a poller the loaded guest did not schedule for a while
    leaves its host's last observed state, and a gap longer than MAX_POLL_GAP raises instead (unobserved)."""
    for host, samples in polls.items():
        ends = [start] + sorted(p.end for p in samples if start < p.end < end) + [end]
        gap = max(b - a for a, b in itertools.pairwise(ends))
        if gap > MAX_POLL_GAP:
            raise AssertionError(f"{host}: no poll finished for {gap:.1f}s between {start:.0f} and {end:.0f}")
    counts = []
    t = start
    while t <= end:
        up = 0
        for samples in polls.values():
            done = [p for p in samples if p.end <= t]
            up += bool(done and max(done, key=lambda p: p.end).rc == 0)
        counts.append(up)
        t += 1
    return counts


# --------------------------------------------------------------------------- background builds (other arches)


class Prebuild:
    """A guest image + the stand-in rootfs tar of one architecture (arm64: built under qemu-user, the slowest
    part of the lab), built by a background process started when the session begins, so that it overlaps the
    other modules; the module that boots guests of that arch joins it. stop() ends it (SIGTERM: the build
    removes its partial files), e.g. when the session is interrupted."""

    def __init__(self, arch: str, cache_dir: Path, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self.arch = arch
        self.log_path = workdir / f"prebuild-{arch}.log"
        self.result_path = workdir / f"prebuild-{arch}.json"
        self.started = time.monotonic()
        self.waited_s: float | None = None
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from tests.vm import lab; sys.exit(lab.prebuild_main(sys.argv[1:]))",
                 arch, str(cache_dir), str(self.result_path)],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def join(self, timeout: float | None = None) -> dict:
        """Wait for the build; its figures (seconds per part, cold or cached). RuntimeError if it failed."""
        t0 = time.monotonic()
        rc = self.proc.wait(timeout=timeout)
        if self.waited_s is None:
            self.waited_s = time.monotonic() - t0
        if rc != 0:
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"background {self.arch} build failed (rc={rc}); {self.log_path}:\n{tail}")
        return json.loads(self.result_path.read_text())

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        import signal
        self.proc.send_signal(signal.SIGTERM)  # specfleet_lab.build_image removes its partial build
        try:
            self.proc.wait(timeout=150)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def prebuild_main(argv: list[str]) -> int:
    """The Prebuild process: ARCH CACHE_DIR RESULT_JSON. Image first (the long pole), then the stand-in. It runs
    at nice 10 (inherited by mmdebstrap and its emulated dpkg): the modules running meanwhile keep the CPU they
    need, and the build takes what is left (it has the whole x86_64 part of the session to finish)."""
    import logging

    from specfleet_lab import build_image
    from specfleet_lab.cli import exit_on_sigterm
    arch, cache_dir, result_path = argv[0], Path(argv[1]), Path(argv[2])
    os.nice(int(os.environ.get("SPECFLEET_PREBUILD_NICE", "10")))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s prebuild: %(message)s", datefmt="%H:%M:%S")
    with exit_on_sigterm():
        t0 = time.monotonic()
        image = build_image(cache_dir, arch=arch)
        t1 = time.monotonic()
        standin_key = standin_image.base_recipe_key(standin_image.debian_arch(arch))
        base_cached = any(cache_dir.glob(f"debian-*-{standin_key[:16]}.tar"))
        tar = standin_tarball(cache_dir, arch)
        t2 = time.monotonic()
    result = {"arch": arch, "image_dir": str(image.dir), "image_built": image.built, "image_s": round(t1 - t0, 1),
              "standin_tar": str(tar), "standin_built": not base_cached, "standin_s": round(t2 - t1, 1)}
    result_path.write_text(json.dumps(result) + "\n")
    print(json.dumps(result), flush=True)
    return 0


def wait_for(what: str, check, timeout: float = 600, every: float = 0.3):
    """Poll `check` until it returns something truthy (returned), at most `timeout` s, else fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


FAULT_DOCKER = "/run/specfleet-fault-docker"  # while it exists, docker.service fails its next start once


def docker_fails_once(guest) -> None:
    """Fault: stop docker so that its next start fails exactly once (a drop-in's ExecStartPre and a flag file)."""
    guest.ssh("mkdir -p /etc/systemd/system/docker.service.d && printf '[Service]\\nExecStartPre=/bin/sh -c "
              f"\"if [ -e {FAULT_DOCKER} ]; then rm -f {FAULT_DOCKER}; exit 1; fi\"\\n' "
              "> /etc/systemd/system/docker.service.d/fault.conf && systemctl daemon-reload && "
              f"touch {FAULT_DOCKER} && systemctl stop docker.socket docker.service")


def docker_restored(guest) -> None:
    """Undo docker_fails_once and start docker."""
    guest.ssh(f"rm -f /etc/systemd/system/docker.service.d/fault.conf {FAULT_DOCKER}; "
              "systemctl daemon-reload; systemctl start docker", check=False)
