"""One upstream download per fleet. The session's 3 Sparks + 1 mirror guest (olah, set up by the
converge itself): the Hub stand-in's byte log shows upstream file bytes / needed file bytes = 1.00 for the whole
fleet (3.00 without the mirror); then a model upgrade (the EAGLE-3 draft moves to its next commit) whose warm-up is
cut by killing olah, and the next converge: the two together fetch only the changed files, each complete one once.
The Sparks serve at the end.

Networking: the mirror host joins the session fleet's shared network (host .31), and the Sparks reach it there: its
`fleet_address` is that address, which makes their default hub_endpoint http://<it>:8090 (the default
mirror_port). The default mirror_allowed_networks hold the lab's networks."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

import specfleet_lab
from specfleet import defaults
from specfleet.host.layout import DOCKER_UNIT, main_pid
from specfleet.pins.lockfile import lock_path
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.conftest import cache_dir, figure
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin
from tests.vm.registry_standin import RegistryStandin

pytestmark = pytest.mark.vm  # all in --full: CI keeps the mirror's unit tests (tests/unit/test_mirror*.py)

TARGET = "openai/gpt-oss-120b"
DRAFT = "nvidia/gpt-oss-120b-Eagle3-long-context"
GATED = "nvidia/Llama-3.3-70B-Instruct-FP4"
MIRROR = "hub-mirror"
OLAH = "specfleet-hub-mirror.service"
DRAFT_ON_SPARK = "/var/lib/specfleet/hf/hub/models--nvidia--gpt-oss-120b-Eagle3-long-context /var/lib/specfleet/drafts"


MIRROR_LAN_HOST = 31  # the mirror host's number on the session fleet's network (the Sparks are .11, .12, ...)


@pytest.fixture(scope="module", autouse=True)
def back_to_the_labs_release(vm_fleet, lab_inventory):
    """After the module, the Sparks serve the lab's release again (its scenarios converge other draft revisions
    through the mirror), so that the next module's converge is the fleet's usual one, not a fleet-wide switch."""
    yield
    run = lab.run_pyinfra(lab_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-3000:]


@pytest.fixture(scope="module")
def mirror_guest(tmp_path_factory, request, vm_fleet):
    workdir = tmp_path_factory.mktemp("mirror-guest")
    request.addfinalizer(lambda: specfleet_lab.down(workdir))
    start = time.monotonic()
    fleet = specfleet_lab.up(count=1, workdir=workdir, cache_dir=cache_dir(), lan=vm_fleet.network,
                             lan_first=MIRROR_LAN_HOST, driver=vm_fleet.driver)
    figure("hub mirror: start the mirror host (a second `up`: from the cached image)", f"{time.monotonic() - start:.1f} s")
    # the lab's cached-image path: the session fleet built (or found) the image, this `up` must not build it again
    assert fleet.timings["image_cached"] is True, fleet.timings
    return fleet.guests[0]


@pytest.fixture(scope="module")
def olah_index(vm_fleet):
    """olah's wheelhouse (its dependency closure for the host's platform), served where the hosts reach the
    controller."""
    said: list[str] = []
    house = wheelhouse_mod.prepare(cache_dir(), wheelhouse_mod.mirror_requirement(), arches=("x86_64",),
                                   say=said.append)
    if house is None:  # the lab's hosts have no other way to olah (no route out): the scenarios cannot run
        pytest.fail(f"no wheelhouse for olah on the controller: {' '.join(said)}", pytrace=False)
    server = wheelhouse_mod.WheelhouseServer(list(house.dirs.values()), bind=vm_fleet.driver.bind_address, port=0,
                                             arches=house.arches).start()
    yield server
    server.stop()


def _mirror_url(mirror_guest) -> str:
    """The mirror as the Sparks reach it: its address on the shared network, the default mirror_port."""
    return f"http://{mirror_guest.lan_address}:{defaults.mirror_port}"


def _inventory(lab_inventory: Path, out: Path, mirror_guest, index_url: str, draft_revision: str,
               mirror_vars: dict | None = None, host_vars: dict | None = None) -> Path:
    inv = yaml.safe_load(lab_inventory.read_text())
    inv["all"]["vars"]["draft_revision"] = draft_revision
    # one olah worker on an emulated CPU serves 3 Sparks: 2 parallel files each instead of 8 (fewer timeouts)
    inv["all"]["vars"]["fetch_workers"] = 2
    inv["all"]["children"]["hub_mirror"] = {"hosts": {MIRROR: {
        "ssh_hostname": mirror_guest.ssh_host, "ssh_port": mirror_guest.ssh_port, "fleet_address": mirror_guest.lan_address,
        "mirror_address": mirror_guest.lan_address, "pip_index_url": index_url, **(mirror_vars or {})}}}
    for name, extra in (host_vars or {}).items():
        inv["all"]["children"]["vm_fleet"]["hosts"][name].update(extra)
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


@pytest.mark.full  # 80 s, which CI's 20 minutes have no room for (docs/dev/ci.md)
def test_one_upstream_download_for_the_whole_fleet(vm_fleet, lab_inventory, hub: HubStandin, mirror_guest, olah_index,
                                                  tmp_path):
    sparks = vm_fleet.guests
    old_draft = HubStandin.commits(DRAFT)[0]
    index_url = olah_index.index_url_for(vm_fleet.controller_address)
    inv = _inventory(lab_inventory, tmp_path / "fleet-mirror.yml", mirror_guest, index_url, old_draft)

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

    # 2. the mirror lists what it caches; the Sparks serve
    status = lab.run_specfleet("mirror", "status", "inventory.py", inventory=inv)
    assert status.returncode == 0 and f"{DRAFT}@{old_draft[:12]}" in status.stdout, status.stdout + status.stderr
    for g in sparks:
        assert lab.guest_curl_completion(g)["choices"], g.name
        assert old_draft in lab.guest_release_json(g), g.name


# ---- faults -----------------------------------------------------------------------------------------------------
DOWN = f"/run/systemd/system/{OLAH}.d/zz-test-down.conf"  # (a runtime mask would not beat the unit in /etc)


def _stop_mirror(mirror_guest, kill: bool) -> None:
    """The mirror down and staying down: a runtime drop-in makes every start fail (also the converge's and
    systemd's own Restart=), then olah is killed (SIGKILL) or stopped."""
    how = f"systemctl kill -s KILL {OLAH}; sleep 1; " if kill else ""
    mirror_guest.ssh(f"mkdir -p {DOWN.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > {DOWN} && "
                     f"systemctl daemon-reload && {how}systemctl stop {OLAH}; systemctl is-active {OLAH} || true")


def _unmask_mirror(mirror_guest) -> None:
    """The mirror back (olah started again)."""
    mirror_guest.ssh(f"rm -f {DOWN} && systemctl daemon-reload && systemctl reset-failed {OLAH}; systemctl start {OLAH}")


def _plain(text: str) -> str:
    """pyinfra's output without colours, and host prefixes unpadded ("[spark-1]    x" -> "[spark-1] x")."""
    return re.sub(r"\] +", "] ", re.sub(r"\x1b\[[0-9;]*m", "", text))


def _upstream_files(hub: HubStandin, repo: str, commit: str) -> dict[str, int]:
    prefix = f"/{repo}/resolve/{commit}/"
    return {p[len(prefix):]: n for p, n in hub.bytes_served().items() if p.startswith(prefix) and n}


@pytest.mark.full
def test_model_upgrade_with_the_mirror_killed_mid_fill_fetches_only_the_changed_files(
        vm_fleet, lab_inventory, hub: HubStandin, mirror_guest, olah_index, tmp_path):
    """The draft moves to its next commit (a model upgrade). Its warm-up is cut by killing olah: the hosts keep
    serving the old commit. The next converge resumes the fill: over both runs, only the files that changed are
    fetched upstream, each complete one once (the cut one again), and the unchanged ones not at all."""
    sparks = vm_fleet.guests
    old_draft, new_draft = HubStandin.commits(DRAFT)[0], HubStandin.commits(DRAFT)[-1]
    index_url = olah_index.index_url_for(vm_fleet.controller_address)
    upgraded = _inventory(lab_inventory, tmp_path / "fleet-upgrade.yml", mirror_guest, index_url, new_draft)
    assert all(old_draft in lab.guest_release_json(g) for g in sparks)  # the first test left them serving old_draft
    old_files, sizes = HubStandin.files(DRAFT, old_draft), HubStandin.files(DRAFT, new_draft)
    changed = sorted(p for p in sizes if p not in old_files or HubStandin.file_meta(DRAFT, p, old_draft)["etag"]
                     != HubStandin.file_meta(DRAFT, p, new_draft)["etag"])  # the warm-up's order
    assert len(changed) >= 2 and len(changed) < len(sizes), changed  # a complete one, a cut one, an unchanged one
    held, complete = changed[-1], changed[:-1]

    # 1. the warm-up is mid-fill (the stand-in holds the last changed file's GET; the ones before it are complete):
    #    kill olah
    hub.reset_log()
    hub.hold(f"/{DRAFT}/resolve/{new_draft}/{held}")
    run = lab.start_pyinfra(upgraded, "eagle3")
    try:
        deadline = time.monotonic() + 900
        while hub.held() < 1 and run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
        assert hub.held() >= 1, f"the warm-up never reached {held}:\n{run.output()[-4000:]}"
        _stop_mirror(mirror_guest, kill=True)
        rc = run.wait(timeout=1800)
    finally:
        hub.release()  # after olah died: its held upstream GET finds the connection gone
        if run.proc.poll() is None:
            run.proc.kill()
    out = _plain(run.output())
    assert rc != 0
    first = _upstream_files(hub, DRAFT, new_draft)
    assert {f: first.get(f) for f in complete} == {f: sizes[f] for f in complete}, first
    assert first.get(held, 0) < sizes[held], first  # cut: not complete
    assert set(first) <= set(changed), f"fetched an unchanged file: {first}"
    for g in sparks:  # each Spark names the mirror, and serves its previous release
        assert f"[{g.name}] hub mirror {MIRROR} ({_mirror_url(mirror_guest)}) failed to warm" in out, g.name
        assert lab.guest_curl_completion(g)["choices"], g.name
        assert old_draft in lab.guest_release_json(g), g.name

    # 2. the mirror back: the next converge resumes the fill without fetching the complete files again; on the way the
    #    upstream answers 429 three times (olah relays them) and the warm-up retries with backoff
    _unmask_mirror(mirror_guest)
    hub.reset_log()
    hub.fail_next(429, 3)
    run2 = lab.run_pyinfra(upgraded, "eagle3")
    assert run2.returncode == 0, run2.output()[-6000:]
    assert [st for _, _, st in hub.requests()].count(429) == 3 and hub.pending_failures() == 0
    retried = mirror_guest.ssh("cat /var/lib/specfleet/jobs/*/log | grep -c 'HTTP 429; retrying in' || true").stdout.strip()
    figure("hub mirror: upstream 429s during the warm-up", f"3 answered 429 upstream, {retried} of them reached the warm-up "
           "and were retried with backoff, converge ok")
    assert int(retried) >= 1, retried  # (olah relays a 429 of its resolve probe; it may absorb one of its own requests')
    second = _upstream_files(hub, DRAFT, new_draft)
    figure("hub mirror killed mid-fill: files fetched upstream again by the next run",
           f"{len(set(second) & set(complete))} of {len(complete)} complete ones ({sorted(second)} fetched: the cut one)")
    assert sorted(second) == [held], second
    assert second[held] == sizes[held], second
    upgrade_bytes = sum(first.get(f, 0) for f in complete) + second[held]
    changed_bytes = sum(sizes[f] for f in changed)
    figure(f"hub mirror: upstream file bytes / changed bytes, model upgrade on N={len(sparks)} Sparks (cut once)",
           f"{upgrade_bytes / changed_bytes:.2f} ({upgrade_bytes:,} / {changed_bytes:,} complete; {len(changed)} of "
           f"{len(sizes)} file(s) changed; {first.get(held, 0):,} B of the cut one fetched again)")

    # 3. the mirror lists the new commit; the Sparks serve it
    status = lab.run_specfleet("mirror", "status", "inventory.py", inventory=upgraded)
    assert status.returncode == 0 and f"{DRAFT}@{new_draft[:12]}" in status.stdout, status.stdout + status.stderr
    for g in sparks:
        assert lab.guest_curl_completion(g)["choices"], g.name
        assert new_draft in lab.guest_release_json(g), g.name


@pytest.mark.full
def test_mirror_down_hub_fallback_hosts_fetch_upstream_the_others_refuse(vm_fleet, lab_inventory, hub: HubStandin,
                                                                       mirror_guest, olah_index, tmp_path):
    sparks = vm_fleet.guests
    old_draft, new_draft = HubStandin.commits(DRAFT)[0], HubStandin.commits(DRAFT)[-1]
    fallback, refusing = sparks[0], sparks[1:]
    inv = _inventory(lab_inventory, tmp_path / "fleet-fallback.yml", mirror_guest,
                     olah_index.index_url_for(vm_fleet.controller_address), old_draft,
                     host_vars={fallback.name: {"hub_fallback": True}})
    vm_fleet.ssh_all(f"rm -rf {DRAFT_ON_SPARK}")
    _stop_mirror(mirror_guest, kill=False)
    try:
        hub.reset_log()
        run = lab.run_pyinfra(inv, "eagle3")
    finally:
        _unmask_mirror(mirror_guest)
    out = _plain(run.output())
    assert run.returncode != 0  # the mirror host and the Sparks without hub_fallback failed
    assert (f"[{fallback.name}] hub mirror {MIRROR} ({_mirror_url(mirror_guest)}) is down or failed to warm; "
            f"hub_fallback: fetching from the Hub directly (http://{vm_fleet.controller_address}:{hub.port})") in out, \
        out[-6000:]
    assert lab.guest_curl_completion(fallback)["choices"] and old_draft in lab.guest_release_json(fallback)
    assert _upstream_files(hub, DRAFT, old_draft)  # from the Hub itself
    for g in refusing:
        assert f"[{g.name}] hub mirror {MIRROR} ({_mirror_url(mirror_guest)}) failed to warm" in out, g.name
        assert lab.guest_curl_completion(g)["choices"], g.name
        assert new_draft in lab.guest_release_json(g), g.name  # still serving what it served


# ---- gated repos and the allowed networks -------------------------------------------------------------------------
_AUTH_GET = ("printf 'Authorization: Bearer %s\\n' \"$(cat /etc/specfleet/hf_token)\" | "  # builtins: not on a command line
             "curl -sS -o /tmp/gated.out -w '%{{http_code}}' -H @- {url}")


@pytest.mark.full
def test_gated_repo_through_the_mirror_needs_the_callers_token(vm_fleet, hub: HubStandin, mirror_guest, olah_index):
    from specfleet.mirror.status import WARM
    commit = HubStandin.commit(GATED)
    size = HubStandin.files(GATED, commit)["config.json"]
    # the mirror host has the fleet's token, root-only, and its warm-up reads the gated repo with it (through olah)
    assert mirror_guest.ssh("stat -c '%a %U' /etc/specfleet/hf_token").stdout.split() == ["600", "root"]
    mirror_guest.ssh("cat > /root/warm.py", input=WARM.encode())
    py = "/var/lib/specfleet-mirror/venv/bin/python /root/warm.py http://127.0.0.1:18090"
    without = mirror_guest.ssh(f"{py} - {GATED} {commit} config.json {size}", check=False)
    assert without.returncode == 1 and "HTTP 401" in without.stderr, without.stderr
    hub.reset_log()
    warmed = mirror_guest.ssh(f"{py} /etc/specfleet/hf_token {GATED} {commit} config.json {size}", check=False)
    assert warmed.returncode == 0, warmed.stdout + warmed.stderr
    assert _upstream_files(hub, GATED, commit) == {"config.json": size}
    # a Spark with the fleet's token gets the cached gated file; without a token it gets a 401 and no file
    url = f"{_mirror_url(mirror_guest)}/{GATED}/resolve/{commit}/config.json"
    spark = vm_fleet.guests[0]
    with_token = spark.ssh(_AUTH_GET.format(url=url)).stdout.strip()
    got = spark.ssh("stat -c %s /tmp/gated.out").stdout.strip()
    assert with_token == "200" and got == str(size), (with_token, got)
    no_token = spark.ssh(f"curl -sS -o /tmp/gated.out -w '%{{http_code}}' {url}").stdout.strip()
    body = spark.ssh("cat /tmp/gated.out").stdout
    assert no_token in ("401", "403") and len(body) != size, (no_token, body[:200])
    assert _upstream_files(hub, GATED, commit) == {"config.json": size}  # served from the cache: no second download
    assert STANDIN_TOKEN not in with_token + body
    # the token is in no log on the mirror host (olah's, its journal, the warm-up jobs'); grep reads it from its file
    leaks = mirror_guest.ssh(f"{{ journalctl -u {OLAH} --no-pager; cat /var/lib/specfleet/jobs/*/log; "
                             "cat /var/lib/specfleet-mirror/logs/* 2>/dev/null; } | grep -cF -f /etc/specfleet/hf_token || true").stdout
    assert leaks.strip() == "0", leaks


@pytest.mark.full
def test_a_peer_outside_the_allowed_networks_is_refused(vm_fleet, lab_inventory, mirror_guest, olah_index, tmp_path):
    """The host's own address on the shared network (in the default 10.0.0.0/8) reaches the mirror; with only
    127.0.0.0/8 allowed, the same request is dropped by the socket's filter while the loopback still gets answers."""
    own, port = mirror_guest.lan_address, _mirror_url(mirror_guest).rsplit(":", 1)[1]
    probe = "curl -s -o /dev/null -m 8 -w '%{{http_code}}' http://{addr}:{port}/; echo \" rc=$?\""
    before = mirror_guest.ssh(probe.format(addr=own, port=port), check=False).stdout.strip()
    assert before.endswith("rc=0") and not before.startswith("000"), before
    inv = _inventory(lab_inventory, tmp_path / "fleet-loopback-only.yml", mirror_guest,
                     olah_index.index_url_for(vm_fleet.controller_address), HubStandin.commits(DRAFT)[0],
                     mirror_vars={"mirror_allowed_networks": ["127.0.0.0/8"]})
    run = lab.run_pyinfra(inv, "hub_mirror")
    assert run.returncode == 0, run.output()[-6000:]
    after = mirror_guest.ssh(probe.format(addr=own, port=port), check=False).stdout.strip()
    loopback = mirror_guest.ssh(probe.format(addr="127.0.0.1", port=port), check=False).stdout.strip()
    figure("hub mirror: request from outside mirror_allowed_networks", f"{own}: {after} (loopback: {loopback})")
    assert after.startswith("000") and not after.endswith("rc=0"), after
    assert loopback.endswith("rc=0") and not loopback.startswith("000"), loopback


# ---- the image registry (image_mirror) --------------------------------------------------------------------------
REGISTRY_PORT = defaults.image_registry_port


@pytest.mark.full
def test_the_image_registry_admits_the_sparks_read_only(vm_fleet, lab_inventory, mirror_guest, olah_index, tmp_path):
    """image_mirror on: the mirror deploy runs the distribution's registry behind a socket on the mirror's fleet
    address. A Spark gets answers and cannot write; the mirror's own fleet address, not a Spark's, is dropped by the
    socket's filter; the package's own unit stays masked; a second run changes nothing. The Sparks are untouched."""
    inv = _inventory(lab_inventory, tmp_path / "fleet-registry.yml", mirror_guest,
                     olah_index.index_url_for(vm_fleet.controller_address), HubStandin.commits(DRAFT)[0],
                     mirror_vars={"image_mirror": True},
                     host_vars={g.name: {"image_mirror": True} for g in vm_fleet.guests})
    before = {g.name: lab.guest_release_json(g) for g in vm_fleet.guests}
    run = lab.run_pyinfra(inv, "hub_mirror")
    assert run.returncode == 0, run.output()[-6000:]
    url = f"http://{mirror_guest.lan_address}:{REGISTRY_PORT}/v2/"
    probe = "curl -s -o /dev/null -m 8 -w '%{{http_code}}' {method} {url}; echo \" rc=$?\""
    spark = vm_fleet.guests[0]
    read = spark.ssh(probe.format(method="", url=url), check=False).stdout.strip()
    write = spark.ssh(probe.format(method="-X POST", url=url + "x/blobs/uploads/"), check=False).stdout.strip()
    outsider = mirror_guest.ssh(probe.format(method="", url=url), check=False).stdout.strip()
    figure("image registry: GET /v2/ from a Spark, POST an upload from a Spark, GET from a host not admitted",
           f"{read} / {write} / {outsider}")
    assert read == "200 rc=0", read
    assert write == "405 rc=0", write
    assert outsider.startswith("000") and not outsider.endswith("rc=0"), outsider
    masked = mirror_guest.ssh("systemctl is-enabled docker-registry.service", check=False).stdout.strip()
    assert masked == "masked", masked
    rerun = lab.run_pyinfra(inv, "hub_mirror")
    assert rerun.returncode == 0 and rerun.n_changed == 0, (rerun.changed, rerun.output()[-3000:])
    assert {g.name: lab.guest_release_json(g) for g in vm_fleet.guests} == before  # the Sparks untouched


# ---- pinned images through the registry: one download for the fleet ----------------------------------------------
REGISTRY_DOWN = "/run/systemd/system/specfleet-image-registry.service.d/zz-test-down.conf"


@pytest.fixture(scope="module")
def nvcr(vm_fleet, mirror_guest, tmp_path_factory):
    """The nvcr.io STAND-IN on the controller, serving the trtllm-serve stand-in image (the rootfs the session built)
    over TLS with anonymous tokens. The controller's `specfleet lock` trusts its CA (SSL_CERT_FILE), the mirror's
    skopeo through /etc/containers/certs.d (nvcr.io's CA is a public one: this trust is the lab's, not the deploy's).
    """
    rootfs = lab.standin_tarball(cache_dir(), "x86_64")
    reg = RegistryStandin(rootfs=rootfs, bind=vm_fleet.driver.bind_address, tls_names=[vm_fleet.controller_address],
                          tls_dir=tmp_path_factory.mktemp("nvcr-tls"), expires_in=600).start()
    host = f"{vm_fleet.controller_address}:{reg.port}"
    bundle = tmp_path_factory.mktemp("nvcr-trust") / "ca-bundle.crt"
    bundle.write_text(Path("/etc/ssl/certs/ca-certificates.crt").read_text() + reg.ca_cert_path.read_text())
    mirror_guest.ssh(f"mkdir -p /etc/containers/certs.d/{host} && cat > /etc/containers/certs.d/{host}/ca.crt",
                     input=reg.ca_cert_path.read_bytes())
    for g in vm_fleet.guests:  # dockerd reads certs.d at each pull: an image_fallback pull from "nvcr.io" is trusted
        g.ssh(f"mkdir -p /etc/docker/certs.d/{host} && cat > /etc/docker/certs.d/{host}/ca.crt",
              input=reg.ca_cert_path.read_bytes())
    old = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(bundle)
    yield reg, f"{host}/{reg.repository}:{reg.tag}"
    if old is None:
        os.environ.pop("SSL_CERT_FILE", None)
    else:
        os.environ["SSL_CERT_FILE"] = old
    reg.stop()


def _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet, image: str, on: bool = True,
                     per_host: dict | None = None) -> Path:
    inv = _inventory(lab_inventory, tmp_path / "fleet-images.yml", mirror_guest,
                     olah_index.index_url_for(vm_fleet.controller_address), HubStandin.commits(DRAFT)[0],
                     mirror_vars={"image_mirror": on}, host_vars={g.name: {"image_mirror": on,
                                                                           **(per_host or {}).get(g.name, {})}
                                                                  for g in vm_fleet.guests})
    doc = yaml.safe_load(inv.read_text())
    doc["all"]["vars"]["image"] = image
    inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    return lab.write_lock(inv)  # `specfleet lock`: the image's digest and its size per platform, from the stand-in


@pytest.mark.full
def test_three_sparks_pull_the_pinned_image_through_one_upstream_download(vm_fleet, lab_inventory, mirror_guest,
                                                                          olah_index, nvcr, tmp_path):
    """N Sparks that lack the image, converging in parallel: the mirror fetches its digest once (upstream bytes /
    image bytes = 1.00, counted by the stand-in), each Spark pulls it from the mirror and serves it under the tag of
    the lock's digest. Then the mirror's registry down and upstream down: a re-converge pulls nothing on any
    Spark and changes nothing there, and they keep serving."""
    reg, image = nvcr
    inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet, image)
    lock = yaml.safe_load(Path(f"{inv}.lock").read_text())["images"][image]
    assert lock["image_digest"] == reg.index_digest and lock["platforms"][reg.platform]["bytes"] == reg.image_bytes()
    reg.reset_log()
    run = lab.run_pyinfra(inv, "eagle3")
    assert run.returncode == 0, run.output()[-6000:]
    sent = sum(reg.blob_bytes().values())
    clients = sorted(reg.client_bytes())
    figure(f"image registry: upstream blob bytes / image bytes, converge of N={len(vm_fleet.guests)} Sparks + 1 "
           "mirror", f"{sent / reg.image_bytes():.2f} ({sent:,} / {reg.image_bytes():,}; clients {clients})")
    assert sent == reg.image_bytes() and len(clients) == 1, (sent, clients)
    tag = f"{image.rpartition(':')[0]}:{reg.index_digest.replace(':', '-')}"
    for g in vm_fleet.guests:
        assert f'"image": "{tag}"' in lab.guest_release_json(g), g.name
        assert lab.guest_curl_completion(g)["choices"], g.name
    status = lab.run_specfleet("mirror", "status", "inventory.py", inventory=inv)
    platform_digest = reg.platform_manifests[reg.platform]["digest"]
    assert status.returncode == 0 and f"@{platform_digest[:19]}  (pinned by the lock)" in status.stdout, status.stdout

    # the mirror's registry down (its every start fails) and upstream down: the Sparks have the digest
    mirror_guest.ssh(f"mkdir -p {REGISTRY_DOWN.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > "
                     f"{REGISTRY_DOWN} && systemctl daemon-reload && systemctl stop specfleet-image-registry.service")
    reg.down(refuse=True, seconds=3600)
    try:
        rerun = lab.run_pyinfra(inv, "eagle3")
        sparks_changed = {h: ops for h, ops in rerun.changed.items() if h != MIRROR and ops}
        figure("image registry: re-converge with the mirror's registry and upstream down",
               f"rc {rerun.returncode}, Spark operations that changed something: {sparks_changed or 'none'}")
        assert not sparks_changed, rerun.output()[-4000:]
        assert sum(reg.blob_bytes().values()) == sent
        for g in vm_fleet.guests:
            assert lab.guest_curl_completion(g)["choices"], g.name
    finally:
        reg.up()
        mirror_guest.ssh(f"rm -f {REGISTRY_DOWN} && systemctl daemon-reload && "
                         "systemctl reset-failed specfleet-image-registry.service; "
                         "systemctl start specfleet-image-registry.service", check=False)



def _another_image(reg: RegistryStandin, vm_fleet, mirror_guest, load_delay_s: float) -> tuple[RegistryStandin, str]:
    """Another nvcr.io STAND-IN with another build of the stand-in (another digest), trusted where the first one is
    (the caller stops it)."""
    rootfs = lab.standin_tarball(cache_dir(), "x86_64", load_delay_s=load_delay_s)
    other = RegistryStandin(rootfs=rootfs, bind=reg.bind, tls_names=reg.tls_names, tls_dir=reg.ca_cert_path.parent,
                            expires_in=600).start()
    host = f"{vm_fleet.controller_address}:{other.port}"
    for g in (mirror_guest, *vm_fleet.guests):
        for d in ("/etc/containers/certs.d", "/etc/docker/certs.d"):
            g.ssh(f"mkdir -p {d}/{host} && cat > {d}/{host}/ca.crt", input=other.ca_cert_path.read_bytes())
    return other, host


def _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path) -> None:
    """The fleet serving the first stand-in's image through the mirror (what the smoke leaves; a no-op after it)."""
    inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet, nvcr[1])
    run = lab.run_pyinfra(inv, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]


def _serving(vm_fleet) -> dict[str, tuple[str, str, str]]:
    """Per Spark: its release, its container's start and dockerd's pid."""
    return {g.name: (json.loads(lab.guest_release_json(g)).get("id", ""),
                     g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip(),
                     g.ssh(main_pid(DOCKER_UNIT)).stdout.strip())
            for g in vm_fleet.guests}


@pytest.mark.full
def test_turning_image_mirror_on_restarts_nothing_and_upstream_down_is_no_fault(vm_fleet, lab_inventory, mirror_guest,
                                                                               olah_index, nvcr, tmp_path):
    """On a fleet serving the pinned image: image_mirror off, then on, changes no release id, restarts no container
    and no dockerd. Then a Spark loses the image's tags while upstream is down and the store has it: the converge
    pulls it from the mirror and succeeds, with no byte from upstream."""
    reg, image = nvcr
    _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path)
    before = _serving(vm_fleet)
    for on in (False, True):
        inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet, image, on=on)
        run = lab.run_pyinfra(inv, "eagle3")
        assert run.returncode == 0, run.output()[-4000:]
        assert _serving(vm_fleet) == before, (on, run.output()[-4000:])
    figure("image registry: image_mirror off then on, on a serving fleet",
           "release ids, containers' StartedAt and dockerd pids unchanged")

    spark = vm_fleet.guests[0]
    tag = f"{image.rpartition(':')[0]}:{reg.index_digest.replace(':', '-')}"
    spark.ssh(f"docker image rm {tag} {image.rpartition(':')[0]}@{reg.index_digest} >/dev/null 2>&1; true")
    reg.reset_log()
    reg.down(refuse=True, seconds=3600)
    try:
        run = lab.run_pyinfra(inv, "eagle3")
    finally:
        reg.up()
    assert run.returncode == 0, run.output()[-4000:]
    assert sum(reg.blob_bytes().values()) == 0
    assert spark.ssh(f"docker image inspect {tag} >/dev/null", check=False).returncode == 0
    assert _serving(vm_fleet) == before  # the tag is back: the same release, nothing restarted
    figure("image registry: upstream down, the store has the image, a Spark lacks it", "pulled from the mirror")


@pytest.mark.full
def test_the_mirror_down_a_spark_pulls_upstream_only_where_image_fallback_allows(vm_fleet, lab_inventory, mirror_guest,
                                                                               olah_index, nvcr, tmp_path):
    """A new image (another stand-in build, another digest) while the mirror's registry cannot start: the Spark with
    image_fallback pulls it from upstream and serves it; the others refuse with one line naming the mirror and keep
    serving their release."""
    _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path)
    other, host = _another_image(nvcr[0], vm_fleet, mirror_guest, load_delay_s=3.0)
    first, *rest = vm_fleet.guests
    before = _serving(vm_fleet)
    inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet,
                           f"{host}/{other.repository}:{other.tag}", per_host={first.name: {"image_fallback": True}})
    mirror_guest.ssh(f"mkdir -p {REGISTRY_DOWN.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > "
                     f"{REGISTRY_DOWN} && systemctl daemon-reload && systemctl stop specfleet-image-registry.service")
    try:
        run = lab.run_pyinfra(inv, "eagle3")
    finally:
        mirror_guest.ssh(f"rm -f {REGISTRY_DOWN} && systemctl daemon-reload && "
                         "systemctl reset-failed specfleet-image-registry.service; "
                         "systemctl start specfleet-image-registry.service", check=False)
        other.stop()
    out = _plain(run.output())
    assert run.returncode != 0 and set(run.failed) >= {g.name for g in rest} and first.name not in run.failed, out[-4000:]
    after = _serving(vm_fleet)
    assert after[first.name][0] != before[first.name][0] and lab.guest_curl_completion(first)["choices"]
    for g in rest:
        lines = [ln for ln in out.splitlines() if f"[{g.name}] image mirror {MIRROR} (" in ln and "not pulling" in ln]
        assert len(lines) == 1, out[-4000:]
        assert after[g.name] == before[g.name] and lab.guest_curl_completion(g)["choices"], g.name
    figure("image registry: the mirror down, one Spark with image_fallback",
           f"{first.name} pulled upstream and serves the new release; {len(rest)} refused with one line each, serving")


# The fleet's registry as the Sparks reach it: the relay its socket starts for their connections (the fetch writes
# through a loopback writer of its own, and the mirror's checks ask the registry on its loopback port, not this door)
REGISTRY_DOOR = "specfleet-image-registry-proxy"
REGISTRY_DOOR_DOWN = f"/run/systemd/system/{REGISTRY_DOOR}.service.d/zz-test-down.conf"


@pytest.mark.full
def test_the_registry_dies_after_the_fetch_a_spark_pulls_upstream_only_where_image_fallback_allows(
        vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path):
    """A new image (another stand-in build, another digest). The mirror's fetch succeeds, but the fleet's registry
    then fails every Spark's pull: the relay its socket starts for a Spark's connection cannot start (its socket
    gives up, and the Sparks' connections are cut). The Spark with image_fallback pulls from upstream, says so, and
    serves the new release; the others fail with one line each and keep serving their release."""
    _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path)
    other, host = _another_image(nvcr[0], vm_fleet, mirror_guest, load_delay_s=3.0)
    first, *rest = vm_fleet.guests
    before = _serving(vm_fleet)
    image = f"{host}/{other.repository}:{other.tag}"
    inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet, image,
                           per_host={first.name: {"image_fallback": True}})
    # the relay cannot start from now on; the one that may run from an earlier pull is stopped (its socket listens)
    mirror_guest.ssh(f"mkdir -p {REGISTRY_DOOR_DOWN.rsplit('/', 1)[0]} && printf '[Service]\\nExecStartPre=/bin/false\\n' > "
                     f"{REGISTRY_DOOR_DOWN} && systemctl daemon-reload && systemctl stop {REGISTRY_DOOR}.service")
    try:
        start = time.monotonic()
        run = lab.run_pyinfra(inv, "eagle3")
        took = time.monotonic() - start
        status = lab.run_specfleet("mirror", "status", "inventory.py", inventory=inv)
    finally:
        mirror_guest.ssh(f"rm -f {REGISTRY_DOOR_DOWN} && systemctl daemon-reload && systemctl reset-failed "
                         f"{REGISTRY_DOOR}.socket {REGISTRY_DOOR}.service; systemctl restart {REGISTRY_DOOR}.socket",
                         check=False)
        other.stop()
    out = _plain(run.output())
    assert run.returncode != 0 and MIRROR not in run.failed, out[-4000:]
    # the fetch succeeded: the store holds the new image's platform manifest, which the lock pins
    fetched = other.platform_manifests[other.platform]["digest"]
    assert f"@{fetched[:19]}  (pinned by the lock)" in status.stdout, status.stdout
    assert set(run.failed) >= {g.name for g in rest} and first.name not in run.failed, out[-4000:]
    after = _serving(vm_fleet)
    said = [ln for ln in out.splitlines() if f"[{first.name}]" in ln and "failed after its fetch" in ln]
    assert len(said) == 1 and "image_fallback: pulling " in said[0], out[-4000:]
    tag = f"{host}/{other.repository}:{other.index_digest.replace(':', '-')}"
    assert f'"image": "{tag}"' in lab.guest_release_json(first) and after[first.name][0] != before[first.name][0]
    assert lab.guest_curl_completion(first)["choices"]
    for g in rest:
        lines = [ln for ln in out.splitlines() if f"[{g.name}]" in ln and "failed after its fetch" in ln]
        assert len(lines) == 1 and "this host keeps serving its current release" in lines[0], out[-4000:]
        assert after[g.name] == before[g.name] and lab.guest_curl_completion(g)["choices"], g.name
    figure("image registry: the registry dies after the mirror's fetch, one Spark with image_fallback",
           f"{first.name} pulled upstream and serves the new release; {len(rest)} failed with one line each, serving "
           f"(converge {took:.0f} s)")


@pytest.mark.full
def test_a_fetch_killed_halfway_resumes_on_the_next_converge(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr,
                                                             tmp_path):
    """A new image, its fetch throttled upstream; the fetch job is stopped (SIGTERM to its unit) once 40 % of the
    image has come: the Sparks refuse and keep serving. The next converge resumes: over both runs, upstream bytes are
    at most the image's plus the blobs in flight at the kill, and the Sparks serve the new image."""
    _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path)
    other, host = _another_image(nvcr[0], vm_fleet, mirror_guest, load_delay_s=2.5)
    try:
        image = other.image_bytes()
        inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet,
                               f"{host}/{other.repository}:{other.tag}")
        before = _serving(vm_fleet)
        other.throttle(max(image // 20, 200_000))  # about 20 s for the whole image
        run = lab.start_pyinfra(inv, "eagle3")
        try:
            deadline = time.monotonic() + 600
            while sum(other.blob_bytes().values()) < 0.4 * image:  # mechanism: the stand-in's own count
                assert run.proc.poll() is None and time.monotonic() < deadline, run.output()[-4000:]
                time.sleep(0.2)
            in_flight = dict(other.blobs_in_flight())
            mirror_guest.ssh("systemctl stop 'specfleet-job-*'")
            rc = run.wait(timeout=900)
        finally:
            if run.proc.poll() is None:
                run.proc.kill()
        first = sum(other.blob_bytes().values())
        assert rc != 0 and _serving(vm_fleet) == before, run.output()[-4000:]
        other.throttle(None)
        again = lab.run_pyinfra(inv, "eagle3")
        assert again.returncode == 0, again.output()[-4000:]
        total = sum(other.blob_bytes().values())
        bound = image + sum(len(other.blob(d)) for d in in_flight)
        figure("image registry: a fetch stopped at 40 %, resumed by the next converge",
               f"upstream {total:,} B for {image:,} (first run {first:,}; bound {bound:,}: + {len(in_flight)} blob(s) "
               "in flight)")
        assert image <= total <= bound
        tag = f"{host}/{other.repository}:{other.index_digest.replace(':', '-')}"
        for g in vm_fleet.guests:
            assert f'"image": "{tag}"' in lab.guest_release_json(g) and lab.guest_curl_completion(g)["choices"]
    finally:
        other.stop()


@pytest.mark.full
def test_a_store_too_small_is_one_error_and_the_sparks_keep_serving(vm_fleet, lab_inventory, mirror_guest, olah_index,
                                                               nvcr, tmp_path):
    """The store on a bounded volume (a 16 MiB tmpfs on the mirror host, never the machine's disk) and a new image
    larger than it: the fetch refuses with one error before it copies, the Sparks refuse to pull and keep serving
    their release."""
    _serve_the_pinned_image(vm_fleet, lab_inventory, mirror_guest, olah_index, nvcr, tmp_path)
    small = "/var/lib/specfleet-mirror/small-store"
    mounted = mirror_guest.ssh(f"mkdir -p {small} && mount -t tmpfs -o size=16m,mode=0755 tmpfs {small}",
                               check=False)
    if mounted.returncode != 0:
        pytest.skip(f"no tmpfs on this host: {mounted.stderr.strip()}")
    other, host = _another_image(nvcr[0], vm_fleet, mirror_guest, load_delay_s=2.0)
    try:
        assert other.image_bytes() > 16 * 2**20
        inv = _image_inventory(lab_inventory, tmp_path, mirror_guest, olah_index, vm_fleet,
                               f"{host}/{other.repository}:{other.tag}")
        doc = yaml.safe_load(inv.read_text())
        doc["all"]["children"]["hub_mirror"]["hosts"][MIRROR]["image_store_dir"] = small
        inv.write_text(yaml.safe_dump(doc, sort_keys=False))
        before = _serving(vm_fleet)
        run = lab.run_pyinfra(inv, "eagle3")
        out = _plain(run.output())
        errors = [ln for ln in out.splitlines() if f"[{MIRROR}]" in ln and "free on its disk; nothing fetched" in ln
                  and "job " in ln]
        figure("image registry: the store's disk too small (16 MiB tmpfs, a 35 MB image)",
               f"rc {run.returncode}; the mirror's error: {errors[:1]}")
        assert run.returncode != 0 and errors, out[-4000:]
        assert _serving(vm_fleet) == before
        for g in vm_fleet.guests:
            assert lab.guest_curl_completion(g)["choices"], g.name
    finally:
        other.stop()
        mirror_guest.ssh(f"umount {small}; rmdir {small}", check=False)
