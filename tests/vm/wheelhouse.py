"""Lab preparation: a controller-side wheelhouse for the guests' pip, served as a PEP 503 simple index.

What a corporate network provides (a PyPI mirror in /etc/pip.conf), not an inventory key: the deploy runs
`pip install <hub_client_requirement>` in each host's fetch virtualenv exactly as in production, and pip
finds the index in the guest's /etc/pip.conf (written by `lab.configure_guest_pip`). Without it, every
fresh TCG guest resolves PyPI itself (TLS and dependency resolution under emulation: minutes per guest).

* `prepare(cache_dir)` runs `pip download` ON THE CONTROLLER, with the controller's pip configuration,
  for the guests' platform (Debian 12: CPython 3.11, glibc 2.36, manylinux; x86_64 and aarch64),
  binary wheels only, and caches the result under `cache_dir/wheelhouse/`, keyed by the requirement,
  the architecture and the download recipe. It then checks the dependency closure with the guests'
  marker environment (pip evaluates markers with the controller's interpreter). Any failure returns
  None after one printed line: the guests then keep pip's default index.
* `WheelhouseServer` serves the cached wheels from a stdlib HTTP server on the address the lab's driver
  binds (the hosts reach it at the controller's address, Fleet.controller_address): `/simple/` and
  `/simple/<project>/` (links carry `#sha256=` and `data-requires-python`) and `/files/<wheel>`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from dataclasses import dataclass, field
from email.parser import Parser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # pragma: no cover - pip always vendors it
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

#: Bumped when the download recipe changes in a way the key below does not capture.
RECIPE_VERSION = "1"
#: Debian 12 (bookworm): python3 3.11.2, glibc 2.36.
GUEST_PYTHON = "3.11"
GUEST_PYTHON_FULL = "3.11.2"
GUEST_GLIBC_MINOR = 36
ARCHES = ("x86_64", "aarch64")
_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
DOWNLOAD_TIMEOUT_S = 600


def hub_client_requirement() -> str:
    """The pinned requirement the deploy installs on each host (specfleet's defaults)."""
    from specfleet.fleet.tunables import load_defaults

    return load_defaults()["hub_client_requirement"]


def mirror_requirement() -> str:
    """The pinned Hub mirror engine (olah) the hub_mirror deploy installs on a mirror host (specfleet's defaults):
    `prepare(cache_dir, mirror_requirement(), arches=...)` makes its wheelhouse (its whole dependency closure)."""
    from specfleet.fleet.tunables import load_defaults

    return load_defaults()["mirror_requirement"]


def guest_arch(guest) -> str:
    """A guest's architecture in wheel-tag spelling (x86_64 unless the guest says otherwise)."""
    arch = str(getattr(guest, "arch", None) or "x86_64")
    return _ARCH_ALIASES.get(arch, arch)


def platform_tags(arch: str) -> list[str]:
    """The manylinux platform tags a Debian 12 guest's pip accepts, newest first."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(GUEST_GLIBC_MINOR, 16, -1)]
    return tags + [f"manylinux2014_{arch}"]


def download_args(requirement: str, arch: str, dest: Path) -> list[str]:
    args = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input",
            "--progress-bar", "off", "-d", str(dest), "--only-binary=:all:",
            "--python-version", GUEST_PYTHON, "--implementation", "cp", "--abi", "cp311", "--abi", "abi3",
            "--abi", "none"]
    for tag in platform_tags(arch):
        args += ["--platform", tag]
    return args + [requirement]


def cache_key(requirement: str, arch: str) -> str:
    recipe = {"requirement": requirement, "arch": arch, "version": RECIPE_VERSION,
              "args": download_args(requirement, arch, Path("DEST"))[3:]}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def house_dir(cache_dir: Path, requirement: str, arch: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", requirement)
    return Path(cache_dir) / "wheelhouse" / f"{slug}-{arch}-{cache_key(requirement, arch)}"


def guest_environment(arch: str) -> dict[str, str]:
    """PEP 508 marker environment of a Debian 12 guest's python3."""
    env = dict(default_environment())
    env.update({"implementation_name": "cpython", "implementation_version": GUEST_PYTHON_FULL,
                "os_name": "posix", "platform_machine": arch, "platform_python_implementation": "CPython",
                "platform_system": "Linux", "python_full_version": GUEST_PYTHON_FULL,
                "python_version": GUEST_PYTHON, "sys_platform": "linux"})
    return env


def _wheel_metadata(path: Path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return Parser().parsestr(z.read(name).decode("utf-8", "replace"), headersonly=True)


def missing_requirements(wheel_dir: Path, requirement: str, arch: str) -> list[str]:
    """The requirements (from `requirement` down through every wheel's Requires-Dist, with the guest's
    markers) that no wheel in `wheel_dir` satisfies. Empty: pip in the guest can install from here alone."""
    versions: dict[str, tuple[str, Path]] = {}
    for whl in sorted(Path(wheel_dir).glob("*.whl")):
        name, version, _build, _tags = parse_wheel_filename(whl.name)
        versions[canonicalize_name(name)] = (str(version), whl)
    env = guest_environment(arch)
    missing: list[str] = []
    seen: set[tuple[str, frozenset, str]] = set()
    todo = [Requirement(requirement)]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras), str(req.specifier))
        if key in seen:
            continue
        seen.add(key)
        found = versions.get(key[0])
        if found is None or not req.specifier.contains(found[0], prereleases=True):
            missing.append(str(req))
            continue
        for line in _wheel_metadata(found[1]).get_all("Requires-Dist") or []:
            dep = Requirement(line)
            extras = req.extras or {""}
            if dep.marker is None or any(dep.marker.evaluate({**env, "extra": e}) for e in extras):
                todo.append(dep)
    return sorted(missing)


def _pip_download(requirement: str, arch: str, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(download_args(requirement, arch, dest), capture_output=True, text=True,
                          timeout=DOWNLOAD_TIMEOUT_S)


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build(cache_dir: Path, requirement: str, arch: str) -> tuple[Path, bool]:
    """The wheelhouse directory for one architecture, downloaded unless cached. Returns (dir, downloaded).
    Raises RuntimeError (with pip's last words) when the download or the closure check fails."""
    final = house_dir(cache_dir, requirement, arch)
    with _locked(final.parent / f".lock-{final.name}"):
        if (final / ".complete").is_file():
            return final, False
        tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            try:
                proc = _pip_download(requirement, arch, tmp)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise RuntimeError(f"pip download {requirement} ({arch}): {e}") from None
            if proc.returncode != 0:
                last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:] or ["?"]
                raise RuntimeError(f"pip download {requirement} ({arch}) failed (rc={proc.returncode}): {last[0]}")
            missing = missing_requirements(tmp, requirement, arch)
            if missing:
                raise RuntimeError(f"pip download {requirement} ({arch}): no wheel for {', '.join(missing)}")
            (tmp / ".complete").write_text("\n".join(sorted(p.name for p in tmp.glob("*.whl"))) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final, True


@dataclass
class Wheelhouse:
    requirement: str
    dirs: dict[str, Path]  # arch -> wheel directory
    seconds: float
    downloaded: bool

    @property
    def arches(self) -> tuple[str, ...]:
        return tuple(self.dirs)


def prepare(cache_dir: Path, requirement: str | None = None, arches=ARCHES, say=print) -> Wheelhouse | None:
    """The wheelhouse for `requirement` (default: specfleet's hub_client_requirement) and every arch, or
    None after ONE line through `say` when it cannot be had (the guests then use pip's default index)."""
    requirement = requirement or hub_client_requirement()
    start = time.monotonic()
    dirs: dict[str, Path] = {}
    downloaded = False
    try:
        for arch in arches:
            dirs[arch], new = build(Path(cache_dir), requirement, arch)
            downloaded |= new
    except Exception as e:  # noqa: BLE001 - any failure means: no wheelhouse, the normal index
        say(f"wheelhouse: not used ({e}); the guests' pip uses its default index")
        return None
    return Wheelhouse(requirement, dirs, time.monotonic() - start, downloaded)


def _requires_python(path: Path) -> str | None:
    try:
        return _wheel_metadata(path).get("Requires-Python")
    except (OSError, KeyError, StopIteration, zipfile.BadZipFile):
        return None


@dataclass
class _Entry:
    path: Path
    sha256: str
    requires_python: str | None


class _Handler(BaseHTTPRequestHandler):
    """A WheelhouseServer's requests: its simple index pages and its files."""

    protocol_version = "HTTP/1.1"
    house: WheelhouseServer  # set on a subclass per server (WheelhouseServer.start)

    def log_message(self, *args):  # quiet: the tests print figures, not access logs
        pass

    def _send(self, code: int, body: bytes, ctype: str, head: bool, extra: dict | None = None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _serve(self, head: bool):
        path = unquote(urlsplit(self.path).path)
        self.house.requests.append(path)
        html_type = "text/html; charset=utf-8"
        if path in ("/simple", "/simple/"):
            return self._send(200, self.house.root_page().encode(), html_type, head)
        m = re.fullmatch(r"/simple/([^/]+)(/?)", path)
        if m:
            if not m.group(2):
                return self._send(301, b"", html_type, head, {"Location": path + "/"})
            page = self.house.project_page(m.group(1))
            if page is None:
                return self._send(404, b"not in the wheelhouse\n", "text/plain", head)
            return self._send(200, page.encode(), html_type, head)
        m = re.fullmatch(r"/files/([^/]+)", path)
        entry = self.house.files.get(m.group(1)) if m else None
        if entry is None:
            return self._send(404, b"not found\n", "text/plain", head)
        size = entry.path.stat().st_size
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if not head:
            with open(entry.path, "rb") as f:
                shutil.copyfileobj(f, self.wfile)

    def do_GET(self):
        self._serve(head=False)

    def do_HEAD(self):
        self._serve(head=True)


@dataclass
class WheelhouseServer:
    """A PEP 503 simple index over the wheels in `dirs` (a filename found in several dirs is served once),
    on `bind`:`port` (0: a free port). Use as a context manager, or start()/stop()."""

    dirs: list[Path]
    bind: str = "127.0.0.1"
    port: int = 0
    arches: tuple[str, ...] = ARCHES  # the guest architectures the wheels were downloaded for
    requests: list[str] = field(default_factory=list)  # paths asked for, in order

    def __post_init__(self):
        self.files: dict[str, _Entry] = {}
        self.projects: dict[str, list[str]] = {}
        for d in self.dirs:
            for whl in sorted(Path(d).glob("*.whl")):
                if whl.name in self.files:
                    continue
                self.files[whl.name] = _Entry(whl, hashlib.sha256(whl.read_bytes()).hexdigest(),
                                              _requires_python(whl))
                project = canonicalize_name(parse_wheel_filename(whl.name)[0])
                self.projects.setdefault(project, []).append(whl.name)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- pages
    def root_page(self) -> str:
        links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(self.projects))
        return f"<!DOCTYPE html>\n<html><head><title>Simple index</title></head><body>\n{links}</body></html>\n"

    def project_page(self, project: str) -> str | None:
        names = self.projects.get(canonicalize_name(project))
        if not names:
            return None
        links = []
        for name in sorted(names):
            e = self.files[name]
            rp = f' data-requires-python="{html.escape(e.requires_python, quote=True)}"' if e.requires_python else ""
            links.append(f'<a href="../../files/{html.escape(name, quote=True)}#sha256={e.sha256}"{rp}>'
                         f"{html.escape(name)}</a><br/>\n")
        return (f"<!DOCTYPE html>\n<html><head><title>Links for {html.escape(project)}</title></head><body>\n"
                f"<h1>Links for {html.escape(project)}</h1>\n{''.join(links)}</body></html>\n")

    def files_served(self) -> int:
        return sum(1 for p in self.requests if p.startswith("/files/"))

    # -- server
    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}/simple"

    def index_url_for(self, host: str) -> str:
        return f"http://{host}:{self.port}/simple"

    def start(self) -> WheelhouseServer:
        handler = type("Handler", (_Handler,), {"house": self})
        self._httpd = ThreadingHTTPServer((self.bind, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="wheelhouse", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> WheelhouseServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
