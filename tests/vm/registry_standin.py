"""STAND-IN for the nvcr.io container registry -- used ONLY in tests. Not a registry, not a mirror, not for production.

specfleet's CI has no internet access, so ``https://nvcr.io`` is replaced in tests by this small stdlib HTTPS
server. It serves ONE repository under its REAL name, ``nvidia/tensorrt-llm/release``, with ONE tag (default
``1.2.0rc6``) whose content is NOT TensorRT-LLM: it is the lab's trtllm-serve stand-in rootfs (or, for unit tests,
a few synthetic files generated in memory), cut into layers by this file. Nothing here is an NVIDIA image.

It implements the read side of the Docker Registry HTTP API v2 / OCI distribution spec, as far as skopeo 1.9.3,
docker and a CNCF distribution 2.8 mirror use it, with nvcr.io's token dance:

    GET  /v2/                                        401 + WWW-Authenticate challenge (200 {} with a valid token)
    GET  /proxy_auth?service=registry&scope=repository:<name>:pull     token JSON (anonymous, or Basic
                                                     "$oauthtoken:<key>"); nvcr.io's realm path is /proxy_auth
    HEAD/GET /v2/<name>/manifests/<tag or digest>    OCI index (tag, index digest), OCI image manifests (digest)
    HEAD/GET /v2/<name>/blobs/<digest>               config and layer blobs (Range: bytes=a-b -> 206)
    GET  /v2/<name>/tags/list                        {"name": ..., "tags": [tag]}
    GET  /_standin/log   GET /_standin/image   POST /_standin/reset   POST /_standin/throttle?bps=N   (test control)
    POST /_standin/down[?refuse=1&seconds=S]   POST /_standin/up                                    (test control)
    POST /_standin/force_expiry?after_bytes=N   POST /_standin/cancel_expiry                        (test control)

Every ``/v2/<name>/...`` request needs ``Authorization: Bearer <token>`` with a token from the realm that is
known, unexpired and scoped to ``<name>``; else 401 with the challenge
``Bearer realm="https://<Host>/proxy_auth",service="registry",scope="repository:<name>:pull"`` (``/v2/`` itself:
no scope). The realm's host is the ``Host`` the client used, so hosts reaching the stand-in at the controller's
bridge address get a realm at that address. Control endpoints need no token.

Manifest content negotiation follows CNCF distribution 2.8: by TAG, the index is served only to a client whose
``Accept`` lists ``application/vnd.oci.image.index.v1+json`` (else 404 MANIFEST_UNKNOWN "OCI index found, but
accept header does not support OCI indexes"); by DIGEST, a manifest is served whatever the Accept header.

The image: the rootfs tar's members, in their order, are split into about ``layers`` (default 8) layers of about
equal size (a hard link goes into the layer of its target); each layer is a tar of those members, gzipped with
mtime 0 and no file name, so digests are the same on every run and machine (given the same rootfs bytes). The
config blob carries architecture/os, ``rootfs.diff_ids`` (sha256 of each uncompressed layer tar) and
``config`` (Env, WorkingDir, Cmd, Labels from ``docker_import_changes()`` of tests/vm/trtllm_standin/image.py).
Beside it, a tiny image of the OTHER platform (linux/arm64 for an amd64 rootfs and vice versa: one small layer)
is listed in the same OCI index. Nothing should ever fetch it; ``blob_bytes()`` shows whether something did.

Byte accounting (body bytes actually written to sockets, 2xx responses only; error and token bodies are not
counted): ``blob_bytes()`` {blob digest: bytes}, ``manifest_bytes()`` {manifest digest: bytes} -- manifests are
counted apart from blobs --, ``client_bytes()`` {client address: {"blobs": n, "manifests": n}}. A full fetch of
one platform costs ``image_bytes(platform)`` = its config blob size + the sizes of its layer blobs in blob bytes,
and the index size + its manifest size in manifest bytes.

Faults:

- ``down()``: every non-control request is answered 503 (``{"errors":[{"code":"UNAVAILABLE",...}]}``), control
  endpoints keep working. ``down(refuse=True)``: the listening socket is CLOSED (new connections are refused,
  ECONNREFUSED), open connections are cut at their next request or body chunk; ``up()`` listens again on the same
  port. Over HTTP, ``/_standin/down?refuse=1`` needs ``seconds=S`` (the stand-in comes back up by itself after S
  seconds: nothing could reach ``/_standin/up`` meanwhile).
- ``throttle(bps)``: every response body is written at most at `bps` bytes/second (per response; applies to
  responses in flight; 0/None = unlimited). ``throttle_sleep_s()`` = seconds the writers were told to sleep.
- ``force_expiry(after_bytes=N)``: once N more blob bytes have been sent (counted from the call; 0 = now), every
  token issued so far expires (its requests get 401 with the challenge), and from then on the realm refuses
  anonymous clients (401) and hands a token only to the Basic ``$oauthtoken:<key>`` login. THIS IS A GUESS of
  nvcr.io's behaviour, from an operator's report (NVIDIA/nvidia-container-toolkit issue 1945) of pulls that fail
  once their anonymous token expires and the realm then wants an NGC API key; the real realm then named was
  another host (authn.nvidia.com/token), the stand-in keeps /proxy_auth. ``cancel_expiry()`` drops a pending
  rule and lets anonymous clients in again (tokens already expired stay expired).
- Token lifetime: ``expires_in`` seconds (default 300, a guess). Note that containers/image (skopeo) treats a
  lifetime under 60 s as 60 s on its side.

Usage in tests::

    with RegistryStandin(rootfs=None) as reg:      # synthetic rootfs, TLS with a throwaway CA, ephemeral port
        reg.url, reg.host, reg.ca_cert_path, reg.index_digest, reg.platform_manifests
        # skopeo inspect --cert-dir <dir of ca_cert_path> docker://<reg.host>/nvidia/tensorrt-llm/release:1.2.0rc6

As a separate process (e.g. on the controller, reached from the lab's hosts at the controller's address)::

    python3 tests/vm/registry_standin.py --bind 0.0.0.0 --port 5443 --rootfs PATH [--tls-dir DIR] \\
        [--key-file F] [--tls-name 192.0.2.7 ...] [--tag T] [--plain-http]

It prints ``listening on URL`` and then one JSON line (url, ca_cert, index_digest, platform_manifests, ...).

This file is stdlib-only on purpose (it may run where only the system Python is available); TLS material is made
with the ``openssl`` command.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import importlib.util
import io
import ipaddress
import json
import platform as platform_mod
import re
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = [
    "RegistryStandin",
    "REPOSITORY",
    "DEFAULT_TAG",
    "INDEX_MEDIA_TYPE",
    "MANIFEST_MEDIA_TYPE",
    "CONFIG_MEDIA_TYPE",
    "LAYER_MEDIA_TYPE",
    "OAUTH_USER",
    "synthetic_rootfs",
    "build_image",
]

REPOSITORY = "nvidia/tensorrt-llm/release"
DEFAULT_TAG = "1.2.0rc6"
SERVICE = "registry"
REALM_PATH = "/proxy_auth"
OAUTH_USER = "$oauthtoken"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CREATED = "2025-11-20T00:00:00Z"  # fixed: the config's timestamps must not change digests between runs

KiB = 1024
MiB = 1024 * KiB
HERE = Path(__file__).resolve().parent

_TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
_OTHER_ARCH = {"amd64": "arm64", "arm64": "amd64"}


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _host_arch() -> str:
    m = platform_mod.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(m, m)


def _platform_entry(arch: str) -> dict:
    return {"architecture": arch, "os": "linux", **({"variant": "v8"} if arch == "arm64" else {})}


# ---------------------------------------------------------------------------------------------------------------
# Image construction (pure functions: no server needed)
# ---------------------------------------------------------------------------------------------------------------


def _stream(seed: str, n: int) -> bytes:
    """n deterministic pseudo-random (incompressible) bytes derived from seed."""
    return hashlib.shake_256(seed.encode()).digest(n)


def _tar_add(tf: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o644,
             kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    ti.mtime = 1700000000
    ti.linkname = link
    ti.size = len(data) if data is not None and kind == tarfile.REGTYPE else 0
    tf.addfile(ti, io.BytesIO(data) if ti.size else None)


def synthetic_rootfs(arch: str | None = None) -> bytes:
    """A small rootfs tar (about 2.3 MiB, generated in memory, deterministic): a few directories, text files,
    pseudo-random "libraries" of 96 KiB-640 KiB (incompressible, so layers keep their size), a symlink and a hard
    link. `arch` (amd64/arm64; default this machine's) names the multiarch library directory, which is how the
    architecture of a rootfs is recognised."""
    arch = arch or _host_arch()
    lib = f"./usr/lib/{_TRIPLETS.get(arch, arch + '-linux-gnu')}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for d in ("./", "./etc/", "./usr/", "./usr/bin/", "./usr/lib/", lib + "/", "./usr/local/", "./usr/local/bin/"):
            _tar_add(tf, d, mode=0o755, kind=tarfile.DIRTYPE)
        _tar_add(tf, "./bin", kind=tarfile.SYMTYPE, link="usr/bin", mode=0o777)
        _tar_add(tf, "./etc/os-release", b'PRETTY_NAME="STAND-IN rootfs (synthetic, tests only)"\nID=standin\n')
        _tar_add(tf, "./usr/bin/sh", b"#!/bin/false\n# STAND-IN: not a shell\n", 0o755)
        _tar_add(tf, "./usr/local/bin/trtllm-serve", b"#!/usr/bin/python3\n# STAND-IN, not TensorRT-LLM\n", 0o755)
        for i, kib in enumerate((640, 512, 384, 320, 256, 192, 128, 96)):
            _tar_add(tf, f"{lib}/libstandin{i}.so", _stream(f"registry-standin:{arch}:lib{i}", kib * KiB))
        _tar_add(tf, "./usr/local/bin/trtllm-serve-hardlink", kind=tarfile.LNKTYPE,  # its target is in layer 1
                 link="./usr/local/bin/trtllm-serve", mode=0o755)
    return buf.getvalue()


def _detect_arch(names: list[str]) -> str | None:
    for arch, triplet in _TRIPLETS.items():
        if any(f"/{triplet}" in n or n.startswith(triplet) for n in names):
            return arch
    return None


def _norm(name: str) -> str:
    return name[2:] if name.startswith("./") else name.lstrip("/")


def _split_plan(members: list[tarfile.TarInfo], layers: int) -> list[list[tarfile.TarInfo]]:
    """Contiguous runs of members of about equal size (data + 512 per header); a hard link joins its target's."""
    where: dict[str, int] = {}
    plan: list[list[tarfile.TarInfo]] = [[]]
    total = max(1, sum(m.size + 512 for m in members if not m.islnk()))
    done = 0
    for m in members:
        target = where.get(_norm(m.linkname)) if m.islnk() else None
        if target is not None:
            plan[target].append(m)
            continue
        if plan[-1] and len(plan) < layers and done >= total * len(plan) / layers:
            plan.append([])
        plan[-1].append(m)
        where[_norm(m.name)] = len(plan) - 1
        done += 0 if m.islnk() else m.size + 512
    return plan


def _layer_tar(src: tarfile.TarFile, members: list[tarfile.TarInfo]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
        for m in members:
            out.addfile(m, src.extractfile(m) if m.isreg() else None)
    return buf.getvalue()


def parse_changes(changes: list[str]) -> dict:
    """The image config's ``config`` object from Dockerfile-like ``docker import --change`` lines (ENV, WORKDIR,
    CMD, ENTRYPOINT, LABEL, USER)."""
    cfg: dict = {}
    for line in changes:
        word, _, rest = line.strip().partition(" ")
        word, rest = word.upper(), rest.strip()
        if word == "ENV":
            key, _, value = rest.partition("=")
            env = [e for e in cfg.get("Env", []) if not e.startswith(key + "=")]
            cfg["Env"] = env + [f"{key}={value}"]
        elif word == "WORKDIR":
            cfg["WorkingDir"] = rest
        elif word in ("CMD", "ENTRYPOINT"):
            value = json.loads(rest) if rest.startswith("[") else ["/bin/sh", "-c", rest]
            cfg["Cmd" if word == "CMD" else "Entrypoint"] = value
        elif word == "LABEL":
            key, _, value = rest.partition("=")
            cfg.setdefault("Labels", {})[key] = value.strip('"')
        elif word == "USER":
            cfg["User"] = rest
        else:
            raise ValueError(f"unsupported change line: {line!r}")
    return cfg


def default_changes() -> list[str]:
    """``docker_import_changes()`` of tests/vm/trtllm_standin/image.py (loaded by path: works in script mode)."""
    spec = importlib.util.spec_from_file_location("_trtllm_standin_image", HERE / "trtllm_standin" / "image.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return list(module.docker_import_changes())


def _config_blob(arch: str, diff_ids: list[str], config: dict, history: list[str]) -> bytes:
    return _canonical({
        "architecture": arch,
        "os": "linux",
        **({"variant": "v8"} if arch == "arm64" else {}),
        "created": CREATED,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": CREATED, "created_by": h} for h in history],
    })


def _image(arch: str, layer_tars: list[bytes], config: dict, blobs: dict, manifests: dict,
           compresslevel: int) -> dict:
    """Add one platform's layers, config and manifest to blobs/manifests; its index entry + accounting."""
    layers = []
    for raw in layer_tars:
        gz = gzip.compress(raw, compresslevel=compresslevel, mtime=0)
        digest = _sha256(gz)
        blobs[digest] = gz
        layers.append({"mediaType": LAYER_MEDIA_TYPE, "digest": digest, "size": len(gz)})
    diff_ids = [_sha256(raw) for raw in layer_tars]
    history = [f"registry stand-in: layer {i + 1} of {len(layer_tars)} of the rootfs" for i in range(len(layer_tars))]
    cfg = _config_blob(arch, diff_ids, config, history)
    cfg_digest = _sha256(cfg)
    blobs[cfg_digest] = cfg
    manifest = _canonical({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": cfg_digest, "size": len(cfg)},
        "layers": layers,
    })
    digest = _sha256(manifest)
    manifests[digest] = (MANIFEST_MEDIA_TYPE, manifest)
    return {
        "digest": digest,
        "bytes": len(cfg) + sum(layer["size"] for layer in layers),
        "manifest_size": len(manifest),
        "config": cfg_digest,
        "layers": [layer["digest"] for layer in layers],
        "entry": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": digest, "size": len(manifest),
                  "platform": _platform_entry(arch)},
    }


def build_image(rootfs: bytes | str | Path | None = None, arch: str | None = None, layers: int = 8,
                changes: list[str] | None = None, compresslevel: int = 6) -> dict:
    """Everything the stand-in serves, from a rootfs tar (path or bytes; None: ``synthetic_rootfs()``).

    Returns {"arch", "index": bytes, "index_digest", "platforms": {"linux/<arch>": {digest, bytes, manifest_size,
    config, layers}}, "blobs": {digest: bytes}, "manifests": {digest: (media type, bytes)}}. `arch`: the rootfs's
    (default: recognised from its multiarch library directory, else this machine's)."""
    if rootfs is None:
        rootfs = synthetic_rootfs(arch)
    changes = default_changes() if changes is None else list(changes)
    with tarfile.open(fileobj=io.BytesIO(rootfs) if isinstance(rootfs, bytes) else None,
                      name=None if isinstance(rootfs, bytes) else Path(rootfs)) as src:
        members = src.getmembers()
        arch = arch or _detect_arch([m.name for m in members]) or _host_arch()
        if arch not in _OTHER_ARCH:
            raise ValueError(f"arch must be amd64 or arm64, not {arch!r}")
        layer_tars = [_layer_tar(src, part) for part in _split_plan(members, max(1, int(layers)))]
    blobs: dict[str, bytes] = {}
    manifests: dict[str, tuple[str, bytes]] = {}
    main = _image(arch, layer_tars, parse_changes(changes), blobs, manifests, compresslevel)
    other_arch = _OTHER_ARCH[arch]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        _tar_add(tf, "./", mode=0o755, kind=tarfile.DIRTYPE)
        _tar_add(tf, "./STANDIN-OTHER-PLATFORM", f"STAND-IN: the {other_arch} image of the registry stand-in; "
                 "nothing should ever fetch it.\n".encode())
    other = _image(other_arch, [buf.getvalue()], {"Cmd": ["/bin/false"]}, blobs, manifests, compresslevel)
    index = _canonical({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [main.pop("entry"), other.pop("entry")],
    })
    index_digest = _sha256(index)
    manifests[index_digest] = (INDEX_MEDIA_TYPE, index)
    return {"arch": arch, "index": index, "index_digest": index_digest,
            "platforms": {f"linux/{arch}": main, f"linux/{other_arch}": other},
            "blobs": blobs, "manifests": manifests}


# ---------------------------------------------------------------------------------------------------------------
# TLS material (openssl CLI)
# ---------------------------------------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")


def make_tls(tls_dir: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key). tls_dir holds only ``ca.crt``, so it can serve as a client's certificate
    directory as it is (skopeo ``--cert-dir``, ``/etc/docker/certs.d/<host:port>/``: a ``*.key`` there would be
    taken for a client key); the keys, the CSR and the server certificate are in ``tls_dir/private/``. The CA is
    kept if present (a restarted stand-in stays trusted); the server certificate is made anew, for subjectAltName
    IP:127.0.0.1, DNS:localhost and `names` (IP addresses or DNS names)."""
    private = tls_dir / "private"
    private.mkdir(parents=True, exist_ok=True)
    private.chmod(0o700)
    ca_crt, ca_key = tls_dir / "ca.crt", private / "ca.key"
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    if not (ca_crt.exists() and ca_key.exists()):
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "../ca.crt", "-days", "30",
                 "-subj", "/CN=specfleet registry STAND-IN test CA (tests only)",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=private)
    sans = ["IP:127.0.0.1", "DNS:localhost"]
    for n in names:
        try:
            sans.append(f"IP:{ipaddress.ip_address(n)}")
        except ValueError:
            sans.append(f"DNS:{n}")
    (private / "server.ext").write_text(
        f"subjectAltName={','.join(dict.fromkeys(sans))}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=registry-standin", cwd=private)
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "../ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(int.from_bytes(secrets.token_bytes(8), "big")), "-days", "30",
             "-extfile", "server.ext", "-out", "server.crt", cwd=private)
    return ca_crt, private / "server.crt", private / "server.key"


# ---------------------------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------------------------


class _RegError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None, detail=None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}
        self.detail = detail


class _Cut(Exception):
    """The stand-in went down (refusing): drop the connection without an answer."""


def _parse_range(header: str | None, total: int) -> tuple[int, int] | None | str:
    """(start, end_inclusive), None (no/ignored range), or 'unsatisfiable'."""
    if not header or not header.strip().lower().startswith("bytes="):
        return None
    spec = header.strip()[6:]
    if "," in spec:
        return None  # multi-range: serve the whole blob (allowed by RFC 9110)
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            start, end = max(total - n, 0), total - 1
        else:
            start = int(first)
            end = min(int(last) if last else total - 1, total - 1)
    except ValueError:
        return None
    if start >= total:
        return "unsatisfiable"
    if start > end:
        return None
    return start, end


_V2 = re.compile(r"^/v2/(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")
_TAGS = re.compile(r"^/v2/(?P<name>[a-z0-9]+(?:[._/-][a-z0-9]+)*)/tags/list$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "RegistryStandin/1.0"
    sys_version = ""
    timeout = 120

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    @property
    def reg(self) -> RegistryStandin:
        return self.server.standin  # type: ignore[attr-defined]

    def _dispatch(self, method: str) -> None:
        self._method = method
        self._started = False
        self._kind = "other"  # what the body counts as: "blob", "manifest" or "other" (not counted)
        self._digest = ""
        split = urlsplit(self.path)
        self._path = unquote(split.path)
        self._client = self.client_address[0]
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            if split.path.startswith("/_standin/"):
                return self._control(method, split.path, query)
            if self.reg._refusing:
                raise _Cut()
            if self.reg._down:
                raise _RegError(503, "UNAVAILABLE", "service unavailable (registry stand-in is down)")
            if method == "POST":
                raise _RegError(405, "UNSUPPORTED", "the registry stand-in is read-only")
            if split.path == REALM_PATH:
                return self._token_endpoint(query)
            if split.path.startswith("/v2/"):
                return self._v2(method, split.path)
            raise _RegError(404, "NOT_FOUND", f"not found on the registry stand-in: {self._path}")
        except _Cut:
            self.close_connection = True
        except _RegError as e:
            self._send_error(e)
        except Exception as e:  # a bug in the stand-in: answer 500 and say why
            traceback.print_exc(file=sys.stderr)
            if not self._started:
                self._send_error(_RegError(500, "UNKNOWN", f"registry stand-in internal error: {e!r}"))
            else:
                self.close_connection = True

    # -- auth ----------------------------------------------------------------------------------------------------

    def _realm(self) -> str:
        host = self.headers.get("Host") or self.reg.host
        return f"{self.reg.scheme}://{host}{REALM_PATH}"

    def _challenge(self, name: str | None) -> dict:
        value = f'Bearer realm="{self._realm()}",service="{SERVICE}"'
        if name:
            value += f',scope="repository:{name}:pull"'
        return {"WWW-Authenticate": value}

    def _require_token(self, name: str | None) -> None:
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        state = self.reg._token_state(token, name)
        if state != "ok":
            detail = [{"Type": "repository", "Name": name, "Action": "pull"}] if name else None
            message = {"missing": "authentication required", "expired": "token expired",
                       "scope": "insufficient scope"}.get(state, "invalid token")
            raise _RegError(401, "UNAUTHORIZED", message, self._challenge(name), detail)

    def _token_endpoint(self, query: dict) -> None:
        scopes = []
        for s in query.get("scope", []):
            for part in s.split(" "):
                kind, _, rest = part.partition(":")
                name, _, _actions = rest.rpartition(":")
                if kind == "repository" and name:
                    scopes.append(name)
        auth = self.headers.get("Authorization") or ""
        authenticated = False
        if auth.lower().startswith("basic "):
            try:
                user, _, password = base64.b64decode(auth[6:].strip()).decode().partition(":")
            except ValueError:
                user = password = ""
            key = self.reg.api_key
            if not (key and user == OAUTH_USER and secrets.compare_digest(password.encode(), key.encode())):
                raise _RegError(401, "UNAUTHORIZED", "incorrect username or password (registry stand-in)")
            authenticated = True
        elif self.reg._anonymous_refused():
            raise _RegError(401, "UNAUTHORIZED", "anonymous access refused: log in with $oauthtoken and an API key "
                            "(registry stand-in; a guess of nvcr.io's behaviour after token expiry)")
        token, issued = self.reg._issue_token(scopes, authenticated)
        body = _canonical({"token": token, "access_token": token, "expires_in": self.reg.expires_in,
                           "issued_at": issued})
        self._send(200, body, {"Content-Type": "application/json"})

    # -- /v2 -----------------------------------------------------------------------------------------------------

    def _v2(self, method: str, path: str) -> None:
        if path == "/v2/":
            self._require_token(None)
            return self._send(200, b"{}", {"Content-Type": "application/json"})
        m = _TAGS.match(path)
        if m:
            name = m.group("name")
            self._require_token(name)
            self._repo_or_404(name)
            return self._send(200, _canonical({"name": name, "tags": [self.reg.tag]}),
                              {"Content-Type": "application/json"})
        m = _V2.match(path)
        if not m:
            raise _RegError(404, "NOT_FOUND", f"not found on the registry stand-in: {path}")
        name, kind, ref = m.group("name", "kind", "ref")
        self._require_token(name)
        self._repo_or_404(name)
        if kind == "manifests":
            return self._manifest(ref)
        return self._blob(ref)

    def _repo_or_404(self, name: str) -> None:
        if name != self.reg.repository:
            raise _RegError(404, "NAME_UNKNOWN", "repository name not known to registry", detail={"name": name})

    def _accepts(self) -> set[str]:
        out = set()
        for value in self.headers.get_all("Accept") or []:
            for part in value.split(","):
                out.add(part.split(";")[0].strip().lower())
        return out

    def _manifest(self, ref: str) -> None:
        img = self.reg._image
        if ref == self.reg.tag:
            if INDEX_MEDIA_TYPE not in self._accepts():
                raise _RegError(404, "MANIFEST_UNKNOWN", "OCI index found, but accept header does not support OCI "
                                "indexes", detail={"Tag": ref})
            digest = img["index_digest"]
        elif ref in img["manifests"]:
            digest = ref
        else:
            raise _RegError(404, "MANIFEST_UNKNOWN", "manifest unknown", detail={"Tag" if ":" not in ref else
                                                                                 "Digest": ref})
        media_type, body = img["manifests"][digest]
        self._kind, self._digest = "manifest", digest
        self._send(200, body, {"Content-Type": media_type, "Docker-Content-Digest": digest, "ETag": f'"{digest}"'})

    def _blob(self, digest: str) -> None:
        if not _DIGEST.match(digest):
            raise _RegError(400, "DIGEST_INVALID", "provided digest did not match uploaded content",
                            detail={"digest": digest})
        data = self.reg._image["blobs"].get(digest)
        if data is None:
            raise _RegError(404, "BLOB_UNKNOWN", "blob unknown to registry", detail={"digest": digest})
        self._kind, self._digest = "blob", digest
        headers = {"Content-Type": "application/octet-stream", "Docker-Content-Digest": digest,
                   "Accept-Ranges": "bytes", "ETag": f'"{digest}"',
                   "Cache-Control": "max-age=31536000"}
        rng = _parse_range(self.headers.get("Range"), len(data))
        if rng == "unsatisfiable":
            raise _RegError(416, "RANGE_INVALID", "requested range not satisfiable",
                            {"Content-Range": f"bytes */{len(data)}"})
        if rng is None:
            return self._send(200, data, headers)
        start, end = rng  # type: ignore[misc]
        self._send(206, data[start:end + 1], {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"})

    # -- sending -------------------------------------------------------------------------------------------------

    def _send_error(self, e: _RegError) -> None:
        body = _canonical({"errors": [{"code": e.code, "message": e.message, "detail": e.detail}]})
        self._send(e.status, body, {"Content-Type": "application/json; charset=utf-8", **e.headers})

    def _send(self, status: int, body: bytes, headers: dict) -> None:
        """Headers, then the body (unless HEAD), throttled, counting bytes before each chunk is written (and
        un-counting it if the write fails), so a client that has data always finds it counted."""
        reg = self.reg
        reg._begin(self._client, self._method, self._path, status)
        self._partial = 0
        try:
            self._started = True
            self.send_response_only(status)
            self.send_header("Date", self.date_time_string())
            self.send_header("Content-Length", str(len(body)))
            if self._path.startswith("/v2/"):
                self.send_header("Docker-Distribution-Api-Version", "registry/2.0")
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            if self._method != "HEAD":
                self._write_body(body, counted=self._kind if 200 <= status < 300 else "other")
        except (OSError, _Cut):
            self.close_connection = True
        finally:
            reg._end(self._client, self._method, self._path, status, self._partial)

    def _write_body(self, body: bytes, counted: str) -> None:
        reg = self.reg
        view = memoryview(body)
        inflight = counted == "blob"
        if inflight:
            reg._blob_started(self._digest, +1)
        try:
            while self._partial < len(body):
                if reg._stopping.is_set() or reg._refusing:
                    raise _Cut()
                bps = reg._throttle_bps
                chunk = 256 * KiB if not bps else max(1 * KiB, min(64 * KiB, bps // 20))
                part = view[self._partial:self._partial + chunk]
                reg._count(self._client, counted, self._digest, len(part))
                try:
                    self.wfile.write(part)
                except BaseException:
                    reg._count(self._client, counted, self._digest, -len(part))
                    raise
                self._partial += len(part)
                if bps:
                    reg._slept(len(part) / bps)
                    time.sleep(len(part) / bps)
        finally:
            if inflight:
                reg._blob_started(self._digest, -1)

    # -- /_standin control ---------------------------------------------------------------------------------------

    def _control(self, method: str, path: str, query: dict) -> None:  # noqa: C901 - a flat dispatch of endpoints
        def ok(obj) -> None:
            self._send(200, (json.dumps(obj, indent=2) + "\n").encode(), {"Content-Type": "application/json"})

        def num(key: str, default: str) -> int:
            try:
                return int((query.get(key) or [default])[0])
            except ValueError:
                raise _RegError(400, "BAD_REQUEST", f"{key} must be an integer") from None

        reg = self.reg
        if path == "/_standin/log" and method in ("GET", "HEAD"):
            return ok(reg._snapshot())
        if path == "/_standin/image" and method in ("GET", "HEAD"):
            return ok(reg.describe())
        if method != "POST":
            raise _RegError(405, "UNSUPPORTED", f"use POST for {path}")
        if path == "/_standin/reset":
            reg.reset_log()
            return ok({"ok": True})
        if path == "/_standin/throttle":
            reg.throttle(num("bps", "0"))
            return ok({"ok": True, "throttle_bps": reg.throttle_bps})
        if path == "/_standin/down":
            refuse, seconds = bool(num("refuse", "0")), num("seconds", "0") or None
            if refuse and not seconds:
                raise _RegError(400, "BAD_REQUEST", "down?refuse=1 needs seconds=S (nothing could call up)")
            # answer first: a refusing stand-in closes this very connection
            ok({"ok": True, "refuse": refuse, "seconds": seconds})
            self.close_connection = True
            return reg.down(refuse=refuse, seconds=seconds)
        if path == "/_standin/up":
            reg.up()
            return ok({"ok": True})
        if path == "/_standin/force_expiry":
            reg.force_expiry(after_bytes=num("after_bytes", "0"))
            return ok({"ok": True, "pending": reg._expiry_after is not None, "forced": reg.expiry_forced()})
        if path == "/_standin/cancel_expiry":
            reg.cancel_expiry()
            return ok({"ok": True})
        raise _RegError(404, "NOT_FOUND", f"unknown stand-in control endpoint {method} {path}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 64
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address):
        """The TLS handshake happens here, in the connection's own thread (not in the accept loop)."""
        if self.tls is not None:
            request.settimeout(30)
            request = self.tls.wrap_socket(request, server_side=True)
            request.settimeout(None)
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, OSError)):
            return  # a client that gave up during the handshake, or a cut connection
        super().handle_error(request, client_address)


class RegistryStandin:
    """STAND-IN for nvcr.io's registry, used ONLY in tests (never point production at it). See the module docstring.

    ``RegistryStandin(rootfs=None, *, bind="127.0.0.1", port=0, tag="1.2.0rc6", repository=REPOSITORY, arch=None,
    layers=8, changes=None, tls=True, tls_dir=None, tls_names=(), api_key=None, expires_in=300, throttle_bps=None,
    compresslevel=6, verbose=False)``

    - `rootfs`: a rootfs tar (path or bytes) cut into `layers` layers; None: ``synthetic_rootfs(arch)``. `arch`:
      amd64/arm64 (default: recognised from the rootfs). `changes`: ``docker import --change`` lines for the config
      (default: trtllm_standin/image.py's ``docker_import_changes()``). The image is built in the constructor.
    - `tls`: HTTPS with a certificate from a CA made by ``openssl`` in `tls_dir` (default: a temporary directory
      removed by stop(); an existing CA there is reused), for IP:127.0.0.1, DNS:localhost, `bind` (unless a
      wildcard) and `tls_names`. `tls_dir` then holds only ``ca.crt`` (keys under ``private/``): it can be given
      as it is to skopeo ``--cert-dir`` or copied to ``/etc/docker/certs.d/<host:port>/``. `tls=False`: plain HTTP (realm http://...), for unit tests.
    - `api_key`: the NGC API key the realm accepts with Basic ``$oauthtoken:<key>`` (None: every Basic login fails).
    - Properties: ``url``, ``host`` (host:port), ``port``, ``scheme``, ``ca_cert_path`` (None without TLS),
      ``reference`` (host/repository:tag), ``index_digest``, ``index_manifest`` (bytes), ``platform`` (the served
      one, "linux/<arch>"), ``other_platform``, ``platform_manifests`` {"linux/amd64": {"digest", "bytes",
      "manifest_size", "config", "layers"}, ...}, ``throttle_bps``, ``is_down``.
    - ``image_bytes(platform=None)``: config + layer blob bytes of a platform (default the served one);
      ``blob(digest)``, ``manifest(digest)``: the stored bytes; ``describe()``: what ``/_standin/image`` answers.
    - Observation: ``blob_bytes()``, ``manifest_bytes()``, ``client_bytes()``, ``blobs_in_flight()`` {digest: n},
      ``requests()`` [{"client", "method", "path", "status"}], ``tokens_issued()`` [{"scopes", "authenticated"}],
      ``throttle_sleep_s()``, ``reset_log()``, ``wait_idle(timeout)``.
    - Faults: ``down(refuse=False, seconds=None)``, ``up()``, ``throttle(bps)``, ``force_expiry(after_bytes=0)``,
      ``expiry_forced()``, ``cancel_expiry()``.
    - ``start()`` (returns self) / ``stop()``; a context manager.
    """

    def __init__(self, rootfs: bytes | str | Path | None = None, *, bind: str = "127.0.0.1", port: int = 0,
                 tag: str = DEFAULT_TAG, repository: str = REPOSITORY, arch: str | None = None, layers: int = 8,
                 changes: list[str] | None = None, tls: bool = True, tls_dir: str | Path | None = None,
                 tls_names: tuple[str, ...] | list[str] = (), api_key: str | None = None, expires_in: int = 300,
                 throttle_bps: int | None = None, compresslevel: int = 6, verbose: bool = False):
        self.bind, self.port = bind, int(port)
        self.tag, self.repository = tag, repository
        self.api_key = api_key or None
        self.expires_in = int(expires_in)
        self.verbose = verbose
        self.tls = bool(tls)
        self.tls_names = list(tls_names)
        self._tls_dir = Path(tls_dir) if tls_dir else None
        self._own_tls_dir: Path | None = None
        self.ca_cert_path: Path | None = None
        self._ssl: ssl.SSLContext | None = None
        self._image = build_image(rootfs, arch=arch, layers=layers, changes=changes, compresslevel=compresslevel)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._throttle_bps: int | None = int(throttle_bps) if throttle_bps else None
        self._down = False
        self._refusing = False
        self._up_timer: threading.Timer | None = None
        # tokens: token -> (seq, expires at (monotonic), scopes, authenticated)
        self._tokens: dict[str, tuple[int, float, tuple[str, ...], bool]] = {}
        self._token_seq = 0
        self._token_cutoff = 0  # tokens with seq <= cutoff are expired (force_expiry)
        self._strict = False  # the realm refuses anonymous clients (after a forced expiry)
        self._expiry_after: int | None = None  # blob bytes still to send before the forced expiry
        self._reset_counters()

    def _reset_counters(self) -> None:
        self._blob_bytes: dict[str, int] = {}
        self._manifest_bytes: dict[str, int] = {}
        self._client_bytes: dict[str, dict[str, int]] = {}
        self._requests: list[dict] = []
        self._blobs_inflight: dict[str, int] = {}
        self._sleep_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def _prepare_tls(self) -> None:
        if not self.tls or self._ssl is not None:
            return
        if shutil.which("openssl") is None:
            raise RuntimeError("the registry stand-in's TLS needs the openssl command (or tls=False)")
        tls_dir = self._tls_dir
        if tls_dir is None:
            tls_dir = self._own_tls_dir = Path(tempfile.mkdtemp(prefix="registry-standin-tls-"))
        names = list(self.tls_names)
        if self.bind not in ("0.0.0.0", "", "::", "127.0.0.1"):
            names.append(self.bind)
        ca, crt, key = make_tls(tls_dir, names)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self._ssl, self.ca_cert_path = ctx, ca

    def _listen(self) -> None:
        server = _Server((self.bind, self.port), _Handler)
        server.standin = self  # type: ignore[attr-defined]
        server.tls = self._ssl
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                  name=f"registry-standin:{self.port}", daemon=True)
        self._server, self._thread = server, thread
        thread.start()

    def _unlisten(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def start(self) -> RegistryStandin:
        if self._server is not None:
            return self
        self._prepare_tls()
        self._stopping.clear()
        self._listen()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._up_timer is not None:
            self._up_timer.cancel()
        self._unlisten()
        self.wait_idle(5)
        if self._own_tls_dir is not None:
            shutil.rmtree(self._own_tls_dir, ignore_errors=True)
            self._own_tls_dir = None
            self._ssl = None

    def __enter__(self) -> RegistryStandin:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what is served ------------------------------------------------------------------------------------------

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def host(self) -> str:
        h = self.bind if self.bind not in ("0.0.0.0", "", "::") else "127.0.0.1"
        return f"{h}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}"

    @property
    def reference(self) -> str:
        return f"{self.host}/{self.repository}:{self.tag}"

    @property
    def index_digest(self) -> str:
        return self._image["index_digest"]

    @property
    def index_manifest(self) -> bytes:
        return self._image["index"]

    @property
    def platform(self) -> str:
        return f"linux/{self._image['arch']}"

    @property
    def other_platform(self) -> str:
        return f"linux/{_OTHER_ARCH[self._image['arch']]}"

    @property
    def platform_manifests(self) -> dict[str, dict]:
        return {p: {**v, "layers": list(v["layers"])} for p, v in self._image["platforms"].items()}

    def image_bytes(self, platform: str | None = None) -> int:
        """Config blob size + the sizes of the layer blobs of `platform` (default the served one)."""
        return self._image["platforms"][platform or self.platform]["bytes"]

    def blob(self, digest: str) -> bytes:
        return self._image["blobs"][digest]

    def manifest(self, digest: str) -> bytes:
        return self._image["manifests"][digest][1]

    def describe(self) -> dict:
        return {"url": self.url, "host": self.host, "repository": self.repository, "tag": self.tag,
                "reference": self.reference, "ca_cert": str(self.ca_cert_path) if self.ca_cert_path else None,
                "index_digest": self.index_digest, "platform": self.platform,
                "platform_manifests": self.platform_manifests}

    # -- observation ---------------------------------------------------------------------------------------------

    def blob_bytes(self) -> dict[str, int]:
        """{blob digest: body bytes written} (2xx only; a digest has an entry once a body of it has started)."""
        with self._lock:
            return dict(self._blob_bytes)

    def manifest_bytes(self) -> dict[str, int]:
        with self._lock:
            return dict(self._manifest_bytes)

    def client_bytes(self) -> dict[str, dict[str, int]]:
        """{client address: {"blobs": n, "manifests": n}}."""
        with self._lock:
            return {c: dict(v) for c, v in self._client_bytes.items()}

    def blobs_in_flight(self) -> dict[str, int]:
        """{blob digest: responses whose body has started and not finished}."""
        with self._lock:
            return {d: n for d, n in self._blobs_inflight.items() if n}

    def requests(self) -> list[dict]:
        """[{"client", "method", "path", "status"}] of non-control requests, in the order they were answered."""
        with self._lock:
            return [dict(r) for r in self._requests]

    def tokens_issued(self) -> list[dict]:
        with self._lock:
            return [{"scopes": list(s), "authenticated": a} for _seq, _exp, s, a in self._tokens.values()]

    def throttle_sleep_s(self) -> float:
        """Seconds the body writers slept for the throttle since the last reset (computed, not measured)."""
        with self._lock:
            return self._sleep_s

    def reset_log(self) -> None:
        """Clear the byte counters, the request log and the throttle sleep; not the faults, not the tokens."""
        with self._lock:
            inflight = dict(self._blobs_inflight)
            self._reset_counters()
            self._blobs_inflight = inflight

    def wait_idle(self, timeout: float = 10.0) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout=timeout)

    def _snapshot(self) -> dict:
        with self._lock:
            return {"blob_bytes": dict(self._blob_bytes), "manifest_bytes": dict(self._manifest_bytes),
                    "client_bytes": {c: dict(v) for c, v in self._client_bytes.items()},
                    "blobs_in_flight": {d: n for d, n in self._blobs_inflight.items() if n},
                    "requests": [dict(r) for r in self._requests], "throttle_bps": self._throttle_bps,
                    "down": self._down or self._refusing, "expiry_forced": self._strict,
                    "expiry_pending_bytes": self._expiry_after}

    def _begin(self, client: str, method: str, path: str, status: int) -> None:
        with self._lock:
            self._inflight += 1
            if not path.startswith("/_standin/"):
                self._requests.append({"client": client, "method": method, "path": path, "status": status})

    def _end(self, client: str, method: str, path: str, status: int, written: int) -> None:
        try:
            if self.verbose and not path.startswith("/_standin/"):
                print(f"{client} {method} {path} {status} {written}", file=sys.stderr, flush=True)
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    def _blob_started(self, digest: str, delta: int) -> None:
        with self._lock:
            self._blobs_inflight[digest] = self._blobs_inflight.get(digest, 0) + delta

    def _slept(self, seconds: float) -> None:
        with self._lock:
            self._sleep_s += seconds

    def _count(self, client: str, kind: str, digest: str, n: int) -> None:
        if kind == "other":
            return
        with self._lock:
            table = self._blob_bytes if kind == "blob" else self._manifest_bytes
            table[digest] = table.get(digest, 0) + n
            per = self._client_bytes.setdefault(client, {"blobs": 0, "manifests": 0})
            per["blobs" if kind == "blob" else "manifests"] += n
            if kind == "blob" and n > 0 and self._expiry_after is not None:
                self._expiry_after -= n
                if self._expiry_after <= 0:
                    self._expire_locked()

    # -- tokens --------------------------------------------------------------------------------------------------

    def _issue_token(self, scopes: list[str], authenticated: bool) -> tuple[str, str]:
        token = "standin." + secrets.token_urlsafe(24)
        issued = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            self._token_seq += 1
            self._tokens[token] = (self._token_seq, time.monotonic() + self.expires_in, tuple(scopes), authenticated)
        return token, issued

    def _token_state(self, token: str | None, name: str | None) -> str:
        """"ok", "missing", "unknown", "expired" or "scope"."""
        if not token:
            return "missing"
        with self._lock:
            entry = self._tokens.get(token)
        if entry is None:
            return "unknown"
        seq, expires_at, scopes, _auth = entry
        if seq <= self._token_cutoff or time.monotonic() >= expires_at:
            return "expired"
        if name is not None and name not in scopes:
            return "scope"
        return "ok"

    def _anonymous_refused(self) -> bool:
        return self._strict

    def _expire_locked(self) -> None:
        self._token_cutoff = self._token_seq
        self._strict = True
        self._expiry_after = None

    # -- faults --------------------------------------------------------------------------------------------------

    @property
    def throttle_bps(self) -> int | None:
        return self._throttle_bps

    def throttle(self, bps: int | None) -> None:
        """Write every response body at most at `bps` bytes/second (None/0: unlimited); in-flight ones too."""
        self._throttle_bps = int(bps) if bps else None

    def force_expiry(self, after_bytes: int = 0) -> None:
        """Once `after_bytes` more blob bytes have been sent (0: now), expire every token issued so far and make the
        realm refuse anonymous clients (a GUESS of nvcr.io's behaviour; see the module docstring)."""
        if after_bytes < 0:
            raise ValueError("after_bytes must be >= 0")
        with self._lock:
            if after_bytes == 0:
                self._expire_locked()
            else:
                self._expiry_after = int(after_bytes)

    def expiry_forced(self) -> bool:
        """True once a force_expiry() has happened (the realm refuses anonymous clients)."""
        with self._lock:
            return self._strict

    def cancel_expiry(self) -> None:
        """Drop a pending force_expiry() and let anonymous clients get tokens again."""
        with self._lock:
            self._expiry_after = None
            self._strict = False

    @property
    def is_down(self) -> bool:
        return self._down or self._refusing

    def down(self, refuse: bool = False, seconds: float | None = None) -> None:
        """503 for every non-control request; `refuse`: close the listening socket (connections refused) and cut
        open connections. `seconds`: come back up() by itself after that long."""
        if refuse:
            self._refusing = True
            self._unlisten()
        else:
            self._down = True
        if seconds:
            if self._up_timer is not None:
                self._up_timer.cancel()
            self._up_timer = threading.Timer(seconds, self.up)
            self._up_timer.daemon = True
            self._up_timer.start()

    def up(self) -> None:
        """Serve again (after down()), on the same port."""
        self._down = False
        if self._refusing:
            self._refusing = False
            if self._server is None and not self._stopping.is_set():
                self._listen()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="STAND-IN for the nvcr.io registry (tests only).")
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--rootfs", default=None, help="rootfs tar to serve (default: a small synthetic one)")
    p.add_argument("--arch", default=None, help="the rootfs's architecture (amd64/arm64; default: recognised)")
    p.add_argument("--tag", default=DEFAULT_TAG)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tls-dir", default=None, help="where the CA and certificate go (ca.crt: trust it)")
    p.add_argument("--tls-name", action="append", default=[], help="extra subjectAltName (IP or DNS; repeatable)")
    p.add_argument("--plain-http", action="store_true", help="serve HTTP, not HTTPS")
    p.add_argument("--key-file", default=None, help="file holding the API key the realm accepts ($oauthtoken)")
    p.add_argument("--expires-in", type=int, default=300, help="token lifetime in seconds")
    p.add_argument("--throttle-bps", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="do not log one line per request to stderr")
    a = p.parse_args(argv)
    key = Path(a.key_file).read_text().strip() if a.key_file else None
    reg = RegistryStandin(a.rootfs, bind=a.bind, port=a.port, tag=a.tag, arch=a.arch, layers=a.layers,
                          tls=not a.plain_http, tls_dir=a.tls_dir, tls_names=a.tls_name, api_key=key,
                          expires_in=a.expires_in, throttle_bps=a.throttle_bps or None, verbose=not a.quiet)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    reg.start()
    print(f"listening on {reg.scheme}://{a.bind}:{reg.port}", flush=True)
    print(json.dumps(reg.describe()), flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        reg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
