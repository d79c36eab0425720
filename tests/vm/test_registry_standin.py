"""Tests of the nvcr.io registry STAND-IN (tests/vm/registry_standin.py), driven by urllib and, where installed,
by skopeo.

Fast, no VM: the stand-in runs in-process on an ephemeral port (or as a subprocess for the script-mode test), with
the small synthetic rootfs unless a test says otherwise.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.vm.registry_standin import (
    DEFAULT_TAG,
    INDEX_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    OAUTH_USER,
    REPOSITORY,
    RegistryStandin,
    build_image,
    synthetic_rootfs,
)
from tests.vm.trtllm_standin.image import docker_import_changes

HERE = Path(__file__).resolve().parent
KEY = "nvapi-standin-key"
ACCEPT_ALL = ", ".join([INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE])
V2 = f"/v2/{REPOSITORY}"


class Client:
    """A minimal registry client on urllib: the challenge, the token, then bearer requests."""

    def __init__(self, reg: RegistryStandin):
        self.reg = reg
        self.ctx = ssl.create_default_context(cafile=str(reg.ca_cert_path)) if reg.tls else None
        self.token: str | None = None

    def request(self, path: str, method: str = "GET", headers: dict | None = None, token: str | None = None,
                read: bool = True):
        """(status, headers, body or the open response when read=False); error statuses are returned too."""
        h = dict(headers or {})
        token = token or self.token
        if token and "Authorization" not in h:
            h["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.reg.url + path, method=method, headers=h)
        try:
            resp = urllib.request.urlopen(req, context=self.ctx, timeout=30)
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()
        if not read:
            return resp.status, resp.headers, resp
        with resp:
            return resp.status, resp.headers, resp.read()

    def challenge(self, path: str = "/v2/") -> dict:
        status, headers, _ = self.request(path, token="none")
        assert status == 401, status
        value = headers["WWW-Authenticate"]
        assert value.startswith("Bearer "), value
        return dict(re.findall(r'(\w+)="([^"]*)"', value))

    def login(self, basic: tuple[str, str] | None = None) -> tuple[int, dict]:
        ch = self.challenge(f"{V2}/manifests/{DEFAULT_TAG}")
        url = f"{ch['realm']}?service={ch['service']}&scope={ch['scope']}"
        h = {}
        if basic:
            h["Authorization"] = "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=h), context=self.ctx, timeout=30) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
        self.token = body["token"]
        return 200, body

    def blob(self, digest: str, headers: dict | None = None):
        return self.request(f"{V2}/blobs/{digest}", headers=headers)


@pytest.fixture(scope="module")
def reg():
    with RegistryStandin(api_key=KEY) as r:
        yield r


@pytest.fixture
def fresh():
    """A private instance, for tests that change faults or need an empty log."""
    with RegistryStandin(api_key=KEY) as r:
        yield r


def _errors(body: bytes) -> list[str]:
    return [e["code"] for e in json.loads(body)["errors"]]


def test_challenge_then_anonymous_token_then_bearer_requests(reg):
    c = Client(reg)
    ch = c.challenge()
    assert ch == {"realm": f"https://{reg.host}/proxy_auth", "service": "registry"}
    ch = c.challenge(f"{V2}/manifests/{DEFAULT_TAG}")
    assert ch["scope"] == f"repository:{REPOSITORY}:pull" and ch["realm"].endswith("/proxy_auth")
    status, body = c.login()
    assert status == 200
    assert body["token"] == body["access_token"] and body["expires_in"] == 300
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", body["issued_at"])
    assert c.request("/v2/")[0] == 200
    status, headers, _ = c.request(f"{V2}/tags/list")
    assert status == 200 and headers["Docker-Distribution-Api-Version"] == "registry/2.0"
    # no token, a made-up token, a token scoped to another repository: 401 with the challenge
    for token in ("none", "standin.made-up"):
        status, headers, body = c.request(f"{V2}/tags/list", token=token)
        assert status == 401 and _errors(body) == ["UNAUTHORIZED"]
        assert f'scope="repository:{REPOSITORY}:pull"' in headers["WWW-Authenticate"]
    other = Client(reg)
    with urllib.request.urlopen(f"{reg.url}/proxy_auth?service=registry&scope=repository:nvidia/other:pull",
                                context=c.ctx) as r:
        other.token = json.loads(r.read())["token"]
    assert other.request(f"{V2}/tags/list")[0] == 401
    assert other.request("/v2/nvidia/other/tags/list")[0] == 404  # scoped, but the stand-in has no such repository


def test_anonymous_and_key_logins(reg):
    c = Client(reg)
    before = len(reg.tokens_issued())
    assert c.login()[0] == 200
    assert c.login((OAUTH_USER, KEY))[0] == 200
    assert [t["authenticated"] for t in reg.tokens_issued()[before:]] == [False, True]
    assert c.request(f"{V2}/tags/list")[0] == 200
    for user, key in ((OAUTH_USER, "wrong-key"), ("someone", KEY)):
        status, body = Client(reg).login((user, key))
        assert status == 401 and body["errors"][0]["code"] == "UNAUTHORIZED", (user, key)
    with RegistryStandin(tls=False) as keyless:  # no key configured: every Basic login fails, anonymous works
        k = Client(keyless)
        assert k.challenge()["realm"] == f"http://{keyless.host}/proxy_auth"
        assert k.login((OAUTH_USER, KEY))[0] == 401
        assert k.login()[0] == 200 and k.request("/v2/")[0] == 200


def test_token_lifetime(fresh):
    c = Client(fresh)
    c.login()
    fresh.expires_in = 0  # tokens issued from now on are expired at once
    late = Client(fresh)
    assert late.login()[1]["expires_in"] == 0
    assert c.request(f"{V2}/tags/list")[0] == 200
    status, headers, body = late.request(f"{V2}/tags/list")
    assert status == 401 and "WWW-Authenticate" in headers and json.loads(body)["errors"][0]["message"] == "token expired"


def test_manifests_by_tag_and_digest(reg):
    c = Client(reg)
    c.login()
    status, headers, body = c.request(f"{V2}/manifests/{DEFAULT_TAG}", headers={"Accept": ACCEPT_ALL})
    assert status == 200
    assert headers["Content-Type"] == INDEX_MEDIA_TYPE
    assert headers["Docker-Content-Digest"] == "sha256:" + hashlib.sha256(body).hexdigest() == reg.index_digest
    assert int(headers["Content-Length"]) == len(body) and body == reg.index_manifest
    status, headers, head_body = c.request(f"{V2}/manifests/{DEFAULT_TAG}", method="HEAD",
                                           headers={"Accept": INDEX_MEDIA_TYPE})
    assert (status, head_body) == (200, b"")
    assert headers["Docker-Content-Digest"] == reg.index_digest and int(headers["Content-Length"]) == len(body)
    # by digest: the index and each child, whatever the Accept header says
    assert c.request(f"{V2}/manifests/{reg.index_digest}")[2] == body
    for info in reg.platform_manifests.values():
        status, headers, child = c.request(f"{V2}/manifests/{info['digest']}", headers={"Accept": MANIFEST_MEDIA_TYPE})
        assert status == 200 and headers["Content-Type"] == MANIFEST_MEDIA_TYPE
        assert headers["Docker-Content-Digest"] == info["digest"] == "sha256:" + hashlib.sha256(child).hexdigest()
    # by tag without the index type in Accept (what distribution 2.8 does), an unknown tag, an unknown digest
    for ref, accept in ((DEFAULT_TAG, MANIFEST_MEDIA_TYPE), ("9.9.9", ACCEPT_ALL), ("sha256:" + "0" * 64, ACCEPT_ALL)):
        status, headers, err = c.request(f"{V2}/manifests/{ref}", headers={"Accept": accept})
        assert status == 404 and _errors(err) == ["MANIFEST_UNKNOWN"], ref
        assert headers["Content-Type"].startswith("application/json")


def test_index_lists_both_platforms(reg):
    index = json.loads(reg.index_manifest)
    assert index["schemaVersion"] == 2 and index["mediaType"] == INDEX_MEDIA_TYPE
    entries = {f"{m['platform']['os']}/{m['platform']['architecture']}": m for m in index["manifests"]}
    host = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    other = {"amd64": "arm64", "arm64": "amd64"}[host]
    assert set(entries) == set(reg.platform_manifests) == {f"linux/{host}", f"linux/{other}"}
    assert reg.platform == f"linux/{host}" and reg.other_platform == f"linux/{other}"
    for plat, info in reg.platform_manifests.items():
        entry = entries[plat]
        assert entry["digest"] == info["digest"] and entry["mediaType"] == MANIFEST_MEDIA_TYPE
        manifest = json.loads(reg.manifest(info["digest"]))
        assert entry["size"] == len(reg.manifest(info["digest"])) == info["manifest_size"]
        assert info["bytes"] == reg.image_bytes(plat) == manifest["config"]["size"] + sum(
            layer["size"] for layer in manifest["layers"])
        config = json.loads(reg.blob(manifest["config"]["digest"]))
        assert f"{config['os']}/{config['architecture']}" == plat
    assert len(reg.platform_manifests[reg.platform]["layers"]) == 8
    assert len(reg.platform_manifests[reg.other_platform]["layers"]) == 1
    assert reg.image_bytes(reg.other_platform) < 2048 < reg.image_bytes()


def test_layers_config_and_rootfs(reg):
    """The layers hold the rootfs's members exactly once, hard links beside their targets; diff_ids are the sha256
    of the uncompressed layers; gzip mtime 0; the config carries docker_import_changes()."""
    info = reg.platform_manifests[reg.platform]
    config = json.loads(reg.blob(info["config"]))
    names, where = [], {}
    for i, (digest, diff_id) in enumerate(zip(info["layers"], config["rootfs"]["diff_ids"], strict=True)):
        gz = reg.blob(digest)
        assert gz[:2] == b"\x1f\x8b" and gz[4:8] == b"\0\0\0\0"  # gzip magic, MTIME 0
        raw = gzip.decompress(gz)
        assert diff_id == "sha256:" + hashlib.sha256(raw).hexdigest()
        with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
            for m in tf.getmembers():
                names.append(m.name)
                where[m.name] = (i, m)
    with tarfile.open(fileobj=io.BytesIO(synthetic_rootfs())) as tf:
        assert sorted(names) == sorted(m.name for m in tf.getmembers())
    layer, link = where["./usr/local/bin/trtllm-serve-hardlink"]
    assert link.islnk() and where[link.linkname][0] == layer
    cfg = config["config"]
    assert cfg["Cmd"] == ["/bin/bash"] and cfg["WorkingDir"] == "/"
    assert "LANG=C.UTF-8" in cfg["Env"]
    assert cfg["Labels"]["org.opencontainers.image.title"] == "trtllm-serve-standin"
    assert len(docker_import_changes()) == len(cfg["Env"]) + 2 + len(cfg["Labels"])


def test_blob_range_and_head(reg):
    c = Client(reg)
    c.login()
    digest = reg.platform_manifests[reg.platform]["layers"][0]
    data = reg.blob(digest)
    status, headers, body = c.blob(digest)
    assert status == 200 and body == data and "sha256:" + hashlib.sha256(body).hexdigest() == digest
    assert headers["Docker-Content-Digest"] == digest and int(headers["Content-Length"]) == len(data)
    status, headers, body = c.blob(digest, {"Range": "bytes=10-99"})
    assert status == 206 and body == data[10:100]
    assert headers["Content-Range"] == f"bytes 10-99/{len(data)}" and int(headers["Content-Length"]) == 90
    status, headers, body = c.blob(digest, {"Range": f"bytes={len(data) - 5}-"})
    assert status == 206 and body == data[-5:]
    assert c.blob(digest, {"Range": f"bytes={len(data)}-"})[0] == 416
    status, headers, body = c.request(f"{V2}/blobs/{digest}", method="HEAD")
    assert (status, body) == (200, b"") and int(headers["Content-Length"]) == len(data)
    status, _, body = c.blob("sha256:" + "0" * 64)
    assert status == 404 and _errors(body) == ["BLOB_UNKNOWN"]


def _fetch_platform(c: Client, reg: RegistryStandin, plat: str) -> None:
    """What a puller of one platform does: index by tag, its manifest, config and layers."""
    status, _, body = c.request(f"{V2}/manifests/{DEFAULT_TAG}", headers={"Accept": ACCEPT_ALL})
    assert status == 200
    digest = next(m["digest"] for m in json.loads(body)["manifests"]
                  if f"linux/{m['platform']['architecture']}" == plat)
    manifest = json.loads(c.request(f"{V2}/manifests/{digest}", headers={"Accept": MANIFEST_MEDIA_TYPE})[2])
    for d in [manifest["config"]["digest"]] + [layer["digest"] for layer in manifest["layers"]]:
        assert c.blob(d)[0] == 200
    assert reg.wait_idle()  # every handler's bookkeeping done (it finishes after the client's last read)


def test_byte_counters_of_a_one_platform_fetch(fresh):
    """Blob bytes of a full fetch of a platform == image_bytes(platform) (config + layers); the index and the
    platform's manifest are counted as manifest bytes; the other platform costs nothing; HEAD, Range and errors
    count what their bodies carry."""
    c = Client(fresh)
    c.login()
    _fetch_platform(c, fresh, fresh.platform)
    info = fresh.platform_manifests[fresh.platform]
    blobs = fresh.blob_bytes()
    assert sum(blobs.values()) == fresh.image_bytes(fresh.platform)
    assert set(blobs) == {info["config"], *info["layers"]}
    assert fresh.manifest_bytes() == {fresh.index_digest: len(fresh.index_manifest), info["digest"]: info["manifest_size"]}
    assert fresh.client_bytes() == {"127.0.0.1": {"blobs": fresh.image_bytes(), "manifests": len(
        fresh.index_manifest) + info["manifest_size"]}}
    other = fresh.platform_manifests[fresh.other_platform]
    assert not set(blobs) & {other["config"], *other["layers"]}
    assert fresh.wait_idle()  # the handlers finish their bookkeeping after the client has read the last byte
    assert fresh.blobs_in_flight() == {}
    fresh.reset_log()
    assert fresh.blob_bytes() == {} and fresh.requests() == []
    c.request(f"{V2}/blobs/{info['layers'][0]}", method="HEAD")
    c.blob(info["layers"][0], {"Range": "bytes=0-9"})
    c.blob("sha256:" + "1" * 64)
    c.blob(info["layers"][0], {"Range": "bytes=999999999-"})  # 416: its error body is not content
    assert fresh.wait_idle()
    assert fresh.blob_bytes() == {info["layers"][0]: 10}
    assert [(r["method"], r["status"]) for r in fresh.requests()] == [("HEAD", 200), ("GET", 206), ("GET", 404),
                                                                      ("GET", 416)]


def test_force_expiry_after_bytes(fresh):
    """Tokens stay good until the blob bytes are sent; then every earlier token is refused with the challenge, the
    realm refuses anonymous clients and the key login works."""
    c = Client(fresh)
    c.login()
    layers = fresh.platform_manifests[fresh.platform]["layers"]
    first, second = (len(fresh.blob(d)) for d in layers[:2])
    fresh.force_expiry(after_bytes=first + 1)
    assert c.blob(layers[0])[0] == 200 and not fresh.expiry_forced()
    status, _, body = c.blob(layers[1])  # started with a good token: finishes although it crosses the limit
    assert status == 200 and len(body) == second and fresh.expiry_forced()
    status, headers, body = c.blob(layers[2])
    assert status == 401 and json.loads(body)["errors"][0]["message"] == "token expired"
    assert headers["WWW-Authenticate"].startswith(f'Bearer realm="https://{fresh.host}/proxy_auth"')
    status, body = Client(fresh).login()
    assert status == 401 and body["errors"][0]["code"] == "UNAUTHORIZED"
    keyed = Client(fresh)
    assert keyed.login((OAUTH_USER, KEY))[0] == 200
    assert keyed.blob(layers[2])[0] == 200
    fresh.cancel_expiry()
    assert Client(fresh).login()[0] == 200
    assert c.blob(layers[2])[0] == 401  # a token expired stays expired


def test_force_expiry_now_over_http(fresh):
    c = Client(fresh)
    c.login()
    control = urllib.request.Request(fresh.url + "/_standin/force_expiry?after_bytes=0", method="POST")
    with urllib.request.urlopen(control, context=c.ctx) as r:
        assert json.loads(r.read())["forced"] is True
    assert c.request("/v2/")[0] == 401 and Client(fresh).login()[0] == 401


def test_throttle_holds_a_blob_in_flight(fresh):
    """Throttled, a blob whose client reads slowly stays in flight with part of it sent; unthrottled, the rest goes
    at once. The sleeps the throttle asked for are bytes / bps (computed, not timed)."""
    c = Client(fresh)
    c.login()
    digest = fresh.platform_manifests[fresh.platform]["layers"][0]
    size = len(fresh.blob(digest))
    fresh.throttle(64 * 1024)
    status, _, resp = c.request(f"{V2}/blobs/{digest}", read=False)
    with resp:
        assert status == 200
        head = resp.read(1024)
        deadline = time.monotonic() + 10
        while fresh.blob_bytes().get(digest, 0) < 16 * 1024 and time.monotonic() < deadline:
            time.sleep(0.02)
        sent = fresh.blob_bytes()[digest]
        assert fresh.blobs_in_flight() == {digest: 1}
        assert 16 * 1024 <= sent < size / 2
        fresh.throttle(None)
        rest = resp.read()
    assert head + rest == fresh.blob(digest)
    assert fresh.wait_idle(10)
    assert fresh.blobs_in_flight() == {} and fresh.blob_bytes()[digest] == size
    assert fresh.throttle_sleep_s() == pytest.approx(sent / (64 * 1024), rel=0.25)


def test_down_answers_503_and_refuse_closes_the_port(fresh):
    c = Client(fresh)
    c.login()
    fresh.down()
    status, _, body = c.request("/v2/")
    assert status == 503 and _errors(body) == ["UNAVAILABLE"]
    assert c.request("/_standin/log")[0] == 200  # control endpoints keep working
    fresh.up()
    assert c.request("/v2/")[0] == 200
    port = fresh.port
    fresh.down(refuse=True)
    with pytest.raises(urllib.error.URLError) as err:
        c.request("/v2/")
    assert isinstance(err.value.reason, ConnectionRefusedError)
    fresh.up()
    assert fresh.port == port and c.request("/v2/")[0] == 200
    fresh.down(refuse=True, seconds=0.3)  # comes back by itself
    deadline = time.monotonic() + 10
    while fresh.is_down and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.request("/v2/")[0] == 200


def test_same_rootfs_same_digests():
    a, b = build_image(synthetic_rootfs("amd64")), build_image(synthetic_rootfs("amd64"))
    assert a["index_digest"] == b["index_digest"] and a["blobs"].keys() == b["blobs"].keys()
    assert a["platforms"]["linux/amd64"]["layers"] != []
    with RegistryStandin(synthetic_rootfs("arm64"), tls=False) as r1, RegistryStandin(
            synthetic_rootfs("arm64"), tls=False, tag="other-tag") as r2:
        assert r1.index_digest == r2.index_digest and r1.platform == "linux/arm64"
    changed = build_image(synthetic_rootfs("amd64"), changes=docker_import_changes() + ["ENV EXTRA=1"])
    assert changed["index_digest"] != a["index_digest"]  # the digest follows the content


def test_script_mode(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    tls_dir = tmp_path / "tls"
    proc = subprocess.Popen([sys.executable, str(HERE / "registry_standin.py"), "--bind", "127.0.0.1", "--port", "0",
                             "--tls-dir", str(tls_dir), "--key-file", str(key_file), "--tls-name", "192.0.2.7",
                             "--quiet"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("listening on https://127.0.0.1:")
        desc = json.loads(proc.stdout.readline())
        assert desc["ca_cert"] == str(tls_dir / "ca.crt") and sorted(os.listdir(tls_dir)) == ["ca.crt", "private"]
        text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", desc["ca_cert"].replace(
            "ca.crt", "private/server.crt")], capture_output=True, text=True, check=True).stdout
        assert "IP Address:127.0.0.1" in text and "IP Address:192.0.2.7" in text
        ctx = ssl.create_default_context(cafile=desc["ca_cert"])
        url = desc["url"]

        def call(path, method="GET", headers=None):
            try:
                with urllib.request.urlopen(urllib.request.Request(url + path, method=method, headers=headers or {}),
                                            context=ctx) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        basic = "Basic " + base64.b64encode(f"{OAUTH_USER}:{KEY}".encode()).decode()
        assert call("/_standin/force_expiry?after_bytes=0", "POST")[0] == 200
        assert call(f"/proxy_auth?service=registry&scope=repository:{REPOSITORY}:pull")[0] == 401
        status, body = call(f"/proxy_auth?service=registry&scope=repository:{REPOSITORY}:pull",
                            headers={"Authorization": basic})
        assert status == 200
        token = json.loads(body)["token"]
        status, body = call(f"{V2}/manifests/{DEFAULT_TAG}",
                            headers={"Authorization": f"Bearer {token}", "Accept": INDEX_MEDIA_TYPE})
        assert status == 200 and "sha256:" + hashlib.sha256(body).hexdigest() == desc["index_digest"]
        log = json.loads(call("/_standin/log")[1])
        assert log["manifest_bytes"] == {desc["index_digest"]: len(body)} and log["expiry_forced"] is True
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


needs_skopeo = pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")


@needs_skopeo
def test_skopeo_inspect_and_copy(fresh, tmp_path):
    """skopeo (containers/image) does the token dance, trusts the stand-in's CA, reads the index and copies one
    platform: exactly that platform's blobs are sent; by platform digest with --preserve-digests too."""
    cert_dir = str(fresh.ca_cert_path.parent)
    env = {**os.environ, "HOME": str(tmp_path)}  # no auth.json or registries.conf of the machine's user

    def skopeo(*args: str) -> str:
        proc = subprocess.run(["skopeo", *args], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    raw = skopeo("inspect", "--raw", "--cert-dir", cert_dir, f"docker://{fresh.reference}")
    assert raw.encode() == fresh.index_manifest
    assert fresh.blob_bytes() == {}
    skopeo("copy", "--src-cert-dir", cert_dir, f"docker://{fresh.reference}", f"dir:{tmp_path / 'by-tag'}")
    info = fresh.platform_manifests[fresh.platform]
    assert fresh.blob_bytes() == {d: len(fresh.blob(d)) for d in [info["config"], *info["layers"]]}
    assert (tmp_path / "by-tag" / "manifest.json").read_bytes() == fresh.manifest(info["digest"])
    fresh.reset_log()
    ref = f"docker://{fresh.host}/{REPOSITORY}@{info['digest']}"
    skopeo("copy", "--preserve-digests", "--src-cert-dir", cert_dir, ref, f"dir:{tmp_path / 'by-digest'}")
    assert sum(fresh.blob_bytes().values()) == fresh.image_bytes()
    assert fresh.manifest_bytes() == {info["digest"]: info["manifest_size"]}
    for d in info["layers"]:
        assert (tmp_path / "by-digest" / d.split(":")[1]).read_bytes() == fresh.blob(d)


@needs_skopeo
def test_skopeo_fails_without_the_ca_and_after_forced_expiry(fresh, tmp_path):
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run(["skopeo", "inspect", "--raw", f"docker://{fresh.reference}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and "certificate" in proc.stderr
    fresh.force_expiry(after_bytes=0)
    cert_dir = str(fresh.ca_cert_path.parent)
    proc = subprocess.run(["skopeo", "inspect", "--raw", "--cert-dir", cert_dir, f"docker://{fresh.reference}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode != 0 and ("401" in proc.stderr or "unauthorized" in proc.stderr.lower()), proc.stderr
    proc = subprocess.run(["skopeo", "inspect", "--raw", "--cert-dir", cert_dir, "--creds", f"{OAUTH_USER}:{KEY}",
                           f"docker://{fresh.reference}"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_lab_rootfs_is_cut_into_eight_layers(standin_rootfs):
    """The lab's trtllm-serve stand-in rootfs, as the VM tests serve it (the session fleet's tar, built by the
    fixture on a cold cache; here a few seconds: gzip of ~100 MiB)."""
    img = build_image(standin_rootfs)
    main = img["platforms"][f"linux/{img['arch']}"]
    assert len(main["layers"]) == 8
    sizes = [len(img["blobs"][d]) for d in main["layers"]]
    assert max(sizes) < 4 * min(sizes), sizes
    config = json.loads(img["blobs"][main["config"]])
    assert len(config["rootfs"]["diff_ids"]) == 8 and config["config"]["Cmd"] == ["/bin/bash"]
