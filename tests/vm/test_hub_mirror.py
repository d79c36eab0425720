"""Issue 10, point 3: one upstream download per fleet. The session's 3 Sparks + 1 mirror guest (olah, set up by the
converge itself): the Hub stand-in's byte log shows upstream file bytes / needed file bytes = 1.00 for the whole
fleet (3.00 without the mirror), and a converge after a model upgrade (the EAGLE-3 draft moves to its next commit)
fetches only the changed files, once. The Sparks serve at the end.

Networking: every guest has its own QEMU user network (slirp) and reaches only the controller's loopback, as
10.0.2.2; guests cannot reach each other. So the mirror guest's port is brought to the controller's loopback by an
SSH tunnel over the mirror guest's own SSH port forward (`ssh -N -L 127.0.0.1:P:127.0.0.1:P`), and the Sparks
reach the mirror at http://10.0.2.2:P: the mirror host's `mirror_address: 10.0.2.2` and `mirror_port: P` make
exactly that their default hub_endpoint (P is also the mirror's port inside its guest, so the URL olah
advertises is the one the Sparks use). On the mirror guest the tunnel's connections come from 127.0.0.1, which
the default mirror_allowed_networks allow."""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from specfleet import vm
from specfleet.lockfile import lock_path
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.conftest import cache_dir, figure
from tests.vm.hub_standin import HubStandin

pytestmark = [pytest.mark.vm, pytest.mark.full]  # boots a 4th guest and installs olah under TCG: the --full tier

TARGET = "openai/gpt-oss-120b"
DRAFT = "nvidia/gpt-oss-120b-Eagle3-long-context"
MIRROR = "hub-mirror"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mirror_guest(tmp_path_factory, request):
    workdir = tmp_path_factory.mktemp("mirror-guest")
    request.addfinalizer(lambda: vm.down(workdir))
    start = time.monotonic()
    fleet = vm.up(count=1, workdir=workdir, cache_dir=cache_dir())
    figure("hub mirror: boot the mirror guest", f"{time.monotonic() - start:.1f} s")
    return fleet.guests[0]


@pytest.fixture(scope="module")
def olah_index():
    """olah's wheelhouse (its dependency closure for the guest's platform), served on the controller's loopback."""
    house = wheelhouse_mod.prepare(cache_dir(), wheelhouse_mod.mirror_requirement(), arches=("x86_64",))
    if house is None:
        pytest.skip("no wheelhouse for olah (pip download failed on the controller)")
    server = wheelhouse_mod.WheelhouseServer(list(house.dirs.values()), bind="127.0.0.1", port=0,
                                             arches=house.arches).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tunnel(mirror_guest, request):
    """Controller 127.0.0.1:P -> the mirror guest's 127.0.0.1:P (see the module docstring)."""
    port = _free_port()
    proc = subprocess.Popen(
        ["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15", "-i", str(mirror_guest.key_path), "-p", str(mirror_guest.port),
         "-L", f"127.0.0.1:{port}:127.0.0.1:{port}", f"{vm.OPERATOR}@{mirror_guest.host}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop():
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()

    request.addfinalizer(stop)
    for _ in range(100):  # the forward is listening once a connect succeeds (nothing answers behind it yet)
        if proc.poll() is not None:
            pytest.fail(f"ssh tunnel to the mirror guest exited: {proc.stderr.read().decode()[-500:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    return port


def _inventory(lab_inventory: Path, out: Path, mirror_guest, port: int, index_url: str, draft_revision: str) -> Path:
    inv = yaml.safe_load(lab_inventory.read_text())
    inv["all"]["vars"]["draft_revision"] = draft_revision
    # one olah worker on an emulated CPU serves 3 Sparks: 2 parallel files each instead of 8 (fewer timeouts)
    inv["all"]["vars"]["fetch_workers"] = 2
    inv["all"]["children"]["hub_mirror"] = {"hosts": {MIRROR: {
        "ssh_hostname": mirror_guest.host, "ssh_port": mirror_guest.port,
        "mirror_address": lab.GUEST_SEES_CONTROLLER, "mirror_port": port, "pip_index_url": index_url}}}
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    Path(f"{out}.lock").write_text(Path(lock_path(lab_inventory)).read_text())
    return lab.write_lock(out)  # `specfleet lock`: adds the draft's pin at draft_revision


def _file_bytes(hub: HubStandin) -> dict[str, int]:
    return {p: n for p, n in hub.bytes_served().items() if "/resolve/" in p and n}


def _needed(commits: dict[str, str], skip: set[tuple[str, str]] = frozenset()) -> int:
    """Distinct bytes the fleet needs: each file of each pinned (repo, commit) once (the target's ignored
    original/ and metal/ excluded, as the pins exclude them)."""
    total = 0
    for repo, commit in commits.items():
        for path, size in HubStandin.files(repo, commit).items():
            if path.startswith(("original/", "metal/")) or (repo, path) in skip:
                continue
            total += size
    return total


def test_one_upstream_download_for_the_whole_fleet(vm_fleet, lab_inventory, hub: HubStandin, mirror_guest, olah_index,
                                                  tunnel, tmp_path):
    sparks = vm_fleet.guests
    old_draft, new_draft = HubStandin.commits(DRAFT)[0], HubStandin.commits(DRAFT)[-1]
    index_url = olah_index.index_url_for(lab.GUEST_SEES_CONTROLLER)
    inv = _inventory(lab_inventory, tmp_path / "fleet-mirror.yml", mirror_guest, tunnel, index_url, old_draft)

    # The Sparks start without the models (earlier modules converged them): every Spark needs every file.
    models = " ".join(f"/var/lib/specfleet/hf/hub/models--{r.replace('/', '--')}" for r in (TARGET, DRAFT))
    vm_fleet.ssh_all(f"rm -rf {models} /var/lib/specfleet/drafts")

    # 1. converge: the mirror is set up, warmed with the fleet's files, then the Sparks stage from it
    hub.reset_log()
    run = lab.run_pyinfra(inv, "eagle3")
    assert run.returncode == 0, run.output()[-6000:]
    upstream = _file_bytes(hub)
    needed = _needed({TARGET: HubStandin.commit(TARGET), DRAFT: old_draft})
    ratio = sum(upstream.values()) / needed
    figure(f"hub mirror: upstream file bytes / needed bytes, converge of N={len(sparks)} Sparks + 1 mirror",
           f"{ratio:.2f} ({sum(upstream.values()):,} / {needed:,}; {len(sparks)}.00 without a mirror)")
    assert ratio == 1.0, f"upstream {sum(upstream.values())} B for {needed} B needed: {sorted(upstream.items())}"
    for g in sparks:  # each Spark has all of it, from the mirror
        out = g.ssh(f"du -sbL {models.split()[0]}/snapshots/*/ | cut -f1").stdout.split()
        assert out and int(out[0]) > 0

    # 2. model upgrade: the draft moves to its next commit; only what changed is fetched, once
    upgraded = _inventory(lab_inventory, tmp_path / "fleet-mirror-upgrade.yml", mirror_guest, tunnel, index_url, new_draft)
    hub.reset_log()
    run = lab.run_pyinfra(upgraded, "eagle3")
    assert run.returncode == 0, run.output()[-6000:]
    upstream = _file_bytes(hub)
    old_files, new_files = HubStandin.files(DRAFT, old_draft), HubStandin.files(DRAFT, new_draft)
    unchanged = {(DRAFT, p) for p in new_files
                 if p in old_files and HubStandin.file_meta(DRAFT, p, old_draft)["etag"] == HubStandin.file_meta(DRAFT, p, new_draft)["etag"]}
    changed = _needed({DRAFT: new_draft}, skip=unchanged)
    figure(f"hub mirror: upstream file bytes / changed bytes, model upgrade on N={len(sparks)} Sparks",
           f"{sum(upstream.values()) / changed:.2f} ({sum(upstream.values()):,} / {changed:,}; "
           f"{len(new_files) - len(unchanged)} changed file(s))")
    assert sum(upstream.values()) == changed, sorted(upstream.items())
    assert all(f"/{new_draft}/" in p for p in upstream), f"fetched something else than the new commit: {upstream}"

    # 3. the mirror lists what it caches; the Sparks serve
    status = lab.run_specfleet("mirror", "status", "inventory.py", inventory=upgraded)
    assert status.returncode == 0 and f"{DRAFT}@{new_draft[:12]}" in status.stdout, status.stdout + status.stderr
    for g in sparks:
        assert lab.guest_curl_completion(g)["choices"], g.name
        assert new_draft in lab.guest_release_json(g), g.name
