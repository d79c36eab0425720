"""The mirror's fetch program (mirror/host/image_fetch.py) with its real parts: skopeo copying from the nvcr.io
STAND-IN (TLS, the 401 challenge, anonymous tokens that expire) into the distribution's registry (a writer the
program starts on the store, as the registry's user), and the fleet's read-only registry serving the result. Counted
on the stand-in's side: one fetch is 1.00 of the image's bytes, a second run fetches nothing; and in --full: a fetch killed
halfway resumes with at most the blobs in flight at the kill, an expired token is survived with the NGC login only,
a stalled copy is stopped.
Needs docker-registry and skopeo (CI installs them: tests/install-deps.sh)."""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specfleet.fleet.programs import program
from specfleet.fleet.templating import ENV
from specfleet.host.layout import REGISTRY_BIN, REGISTRY_USER
from tests.unit.installed import installed
from tests.vm.registry_standin import RegistryStandin

pytestmark = pytest.mark.skipif(
    not (os.path.exists(REGISTRY_BIN) and shutil.which("skopeo") and shutil.which("setpriv")),
    reason="docker-registry, skopeo or setpriv missing (tests/install-deps.sh installs them)")

FETCH = program("image_fetch.py")
KEY = "nvapi-standin-key"


@pytest.fixture
def store():
    """A store the registry's user owns, on a path it can reach (pytest's tmp dirs are root-only)."""
    root = Path(tempfile.mkdtemp(prefix="specfleet-store-", dir="/var/tmp"))
    root.chmod(0o755)
    (root / "images").mkdir()
    uid = pwd.getpwnam(REGISTRY_USER)
    os.chown(root / "images", uid.pw_uid, uid.pw_gid)
    for role, writer in (("writer", True), ("reader", False)):
        (root / f"{role}.yml").write_text(ENV.get_template("image-registry.yml.j2").render(
            role=json.dumps(role), store=json.dumps(str(root / "images")), addr=json.dumps("127.0.0.1:0"),
            writer=str(writer).lower(), reader=str(not writer).lower()))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def upstream():
    """The stand-in on 127.0.0.1, trusted by skopeo through the certs.d directory containers/image reads."""
    with RegistryStandin(api_key=KEY, expires_in=600) as reg:
        certs = Path("/etc/containers/certs.d") / reg.host
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(reg.ca_cert_path, certs / "ca.crt")
        try:
            yield reg
        finally:
            shutil.rmtree(certs, ignore_errors=True)


def _argv(store: Path, reg: RegistryStandin, authfile: Path | None = None) -> list[str]:
    platform = reg.platform_manifests[reg.platform]
    src = f"{reg.host}/{reg.repository}@{platform['digest']}"
    auth = ["--authfile", str(authfile)] if authfile else []
    return [sys.executable, "-c", FETCH.read_text(), "--writer-config", str(store / "writer.yml"), "--user",
            REGISTRY_USER, *auth, src, f"{reg.host.replace(':', '_')}/{reg.repository}", str(platform["bytes"])]


def _fetch(store, reg, authfile=None, progress=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed()),
           **({"SPECFLEET_PROGRESS_FILE": str(progress)} if progress else {})}
    return subprocess.run(_argv(store, reg, authfile), capture_output=True, text=True, timeout=300, env=env)


def _served_by_the_reader(store: Path, reg: RegistryStandin) -> str | None:
    """What the fleet's read-only registry answers for the platform manifest (its Docker-Content-Digest)."""
    port = 15999
    proc = subprocess.Popen(["setpriv", f"--reuid={REGISTRY_USER}", f"--regid={REGISTRY_USER}", "--init-groups",
                             REGISTRY_BIN, "serve", str(store / "reader.yml")],
                            env={**os.environ, "REGISTRY_HTTP_ADDR": f"127.0.0.1:{port}"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    digest = reg.platform_manifests[reg.platform]["digest"]
    url = f"http://127.0.0.1:{port}/v2/{reg.host.replace(':', '_')}/{reg.repository}/manifests/{digest}"
    try:
        for _ in range(100):
            try:
                req = urllib.request.Request(url, method="HEAD", headers={
                    "Accept": "application/vnd.oci.image.manifest.v1+json"})
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return resp.headers.get("Docker-Content-Digest")
            except urllib.error.HTTPError:
                return None  # the registry answers: not there
            except OSError:
                time.sleep(0.1)  # not listening yet
        return None
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_one_fetch_is_one_download_and_the_fleets_registry_serves_it(store, upstream, tmp_path):
    progress = tmp_path / "progress.json"
    run = _fetch(store, upstream, progress=progress)
    assert run.returncode == 0, run.stdout + run.stderr
    image = upstream.image_bytes()
    sent = sum(upstream.blob_bytes().values())
    print(f"\n  image fetch: upstream blob bytes / image bytes = {sent / image:.2f} ({sent:,} / {image:,})")
    assert sent == image
    assert _served_by_the_reader(store, upstream) == upstream.platform_manifests[upstream.platform]["digest"]
    last = json.loads(progress.read_text())
    assert last["kind"] == "image-fetch" and last["bytes_done"] == last["bytes_total"] == image
    # the other platform of the index is never fetched
    other = upstream.platform_manifests[upstream.other_platform]
    assert not set(upstream.blob_bytes()) & {d if isinstance(d, str) else d["digest"] for d in other["layers"]}
    upstream.reset_log()
    again = _fetch(store, upstream)
    assert again.returncode == 0 and "in the store already" in again.stdout, again.stdout + again.stderr
    assert sum(upstream.blob_bytes().values()) == 0


@pytest.mark.full
def test_a_fetch_killed_halfway_resumes_with_at_most_the_blobs_in_flight(store, upstream):
    image = upstream.image_bytes()
    upstream.throttle(max(image // 8, 64_000))  # about 8 s for the whole image
    proc = subprocess.Popen(_argv(store, upstream), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(installed())})
    try:
        deadline = time.monotonic() + 120
        while sum(upstream.blob_bytes().values()) < 0.4 * image:  # mechanism: the stand-in's own count
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)
        in_flight = dict(upstream.blobs_in_flight())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
    before = sum(upstream.blob_bytes().values())
    sizes = {digest: len(upstream.blob(digest)) for digest in upstream.blob_bytes()}
    upstream.throttle(None)
    run = _fetch(store, upstream)
    assert run.returncode == 0, run.stdout + run.stderr
    total = sum(upstream.blob_bytes().values())
    bound = image + sum(sizes.get(d, 0) for d in in_flight)
    print(f"\n  image fetch killed at {before / image:.0%}: upstream bytes {total:,} for {image:,} "
          f"(bound {bound:,}: + {len(in_flight)} blob(s) in flight at the kill)")
    assert image <= total <= bound
    assert _served_by_the_reader(store, upstream) == upstream.platform_manifests[upstream.platform]["digest"]


def _login(tmp_path: Path, reg: RegistryStandin) -> Path:
    authfile = tmp_path / "ngc-auth.json"
    auth = base64.b64encode(f"$oauthtoken:{KEY}".encode()).decode()
    authfile.write_text(json.dumps({"auths": {reg.host: {"auth": auth}}}))
    authfile.chmod(0o600)
    return authfile


@pytest.mark.full
@pytest.mark.parametrize("login", [True, False], ids=["ngc-key", "anonymous"])
def test_a_token_ended_mid_fetch_is_survived_with_the_ngc_login_only(store, upstream, tmp_path, login):
    image = upstream.image_bytes()
    upstream.throttle(max(image // 6, 64_000))
    upstream.force_expiry(after_bytes=image // 3)
    run = _fetch(store, upstream, authfile=_login(tmp_path, upstream) if login else None)
    assert upstream.expiry_forced() and KEY not in run.stdout + run.stderr
    if login:
        assert run.returncode == 0, run.stdout + run.stderr
        assert _served_by_the_reader(store, upstream) == upstream.platform_manifests[upstream.platform]["digest"]
    else:
        assert run.returncode != 0
        assert "set ngc_api_key_file" in run.stdout.strip().splitlines()[-1], run.stdout
        assert _served_by_the_reader(store, upstream) is None


def test_over_the_budget_unpinned_images_are_evicted_first_and_then_it_refuses(store, upstream, tmp_path):
    """A store holding an image the lock pins no more: over the budget, the fetch deletes it and collects its blobs
    before it fetches; when even that leaves the budget short, one line and nothing fetched."""
    old = RegistryStandin(rootfs=None, api_key=KEY, expires_in=600, tag="old", layers=3)  # another digest
    with old:
        certs = Path("/etc/containers/certs.d") / old.host
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(old.ca_cert_path, certs / "ca.crt")
        try:
            assert _fetch(store, old).returncode == 0
        finally:
            shutil.rmtree(certs, ignore_errors=True)
    image = upstream.image_bytes()
    budget = ["--budget-bytes", str(image + image // 2), "--keep", ""]  # room for the new image only
    run = subprocess.run(_argv(store, upstream) [:7] + budget + _argv(store, upstream)[7:], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(installed())})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "evicting " in run.stdout and old.platform_manifests[old.platform]["digest"] in run.stdout
    assert _served_by_the_reader(store, upstream) == upstream.platform_manifests[upstream.platform]["digest"]
    short = ["--budget-bytes", str(image + image // 2), "--keep", ""]  # the pinned one kept: no room for another
    with RegistryStandin(rootfs=None, api_key=KEY, expires_in=600, tag="new", layers=5) as new:
        certs = Path("/etc/containers/certs.d") / new.host
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copy(new.ca_cert_path, certs / "ca.crt")
        try:
            argv = _argv(store, new)
            keep = ["--keep", upstream.platform_manifests[upstream.platform]["digest"]]
            refused = subprocess.run(argv[:7] + short[:2] + keep + argv[7:], capture_output=True, text=True,
                                     timeout=300, env={**os.environ, "PYTHONPATH": str(installed())})
        finally:
            shutil.rmtree(certs, ignore_errors=True)
        assert refused.returncode != 0 and sum(new.blob_bytes().values()) == 0
    line = refused.stderr.strip().splitlines()[-1]
    assert line.startswith("image-fetch: image store ") and "over image_store_budget_gb" in line, line
    assert _served_by_the_reader(store, upstream) == upstream.platform_manifests[upstream.platform]["digest"]


@pytest.mark.full
def test_a_copy_whose_store_stops_growing_is_stopped_with_one_line(store, upstream):
    """A stalled upload (as on a disk filled by something else): the stand-in sends nothing more after the first
    blob bytes, and the copy is stopped once the store has not grown for --stall-sec, with one line; skopeo goes
    with it."""
    upstream.throttle(1)  # one byte a second: the store's blob files stop growing between two looks
    argv = _argv(store, upstream)
    run = subprocess.run(argv[:7] + ["--stall-sec", "4"] + argv[7:], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(installed())})
    upstream.throttle(None)
    line = run.stderr.strip().splitlines()[-1]
    assert run.returncode != 0 and "has not grown for 4 s" in line and line.endswith("stopped"), run.stderr
    assert subprocess.run(["pgrep", "-f", f"skopeo copy .*{upstream.host}"], capture_output=True).returncode == 1
