"""The VM tier's speed-ups, without VMs: the wheelhouse (the guests' PyPI mirror) and its simple index, the
guests' pip.conf, the per-phase bookkeeping, and the stand-in image streamed into `docker import -`."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from specfleet_lab import Fleet, VMError
from specfleet_lab.host import as_user
from specfleet_lab.qemu.guest import QemuHost
from tests.vm import lab, wheelhouse
from tests.vm.phases import PhaseClock


def make_wheel(d: Path, name: str, version: str, tag: str = "py3-none-any", requires: tuple[str, ...] = (),
               requires_python: str | None = ">=3.10") -> Path:
    """A minimal valid wheel (METADATA, WHEEL, RECORD) with the given Requires-Dist lines."""
    dist = f"{name}-{version}.dist-info"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Python: {requires_python}"] if requires_python else []
    meta += [f"Requires-Dist: {r}" for r in requires]
    py, abi, plat = tag.split("-")
    files = {f"{name.replace('-', '_')}/__init__.py": f"__version__ = {version!r}\n",
             f"{dist}/METADATA": "\n".join(meta) + "\n\n",
             f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    record = "".join(f"{p},sha256={hashlib.sha256(c.encode()).hexdigest()},{len(c)}\n" for p, c in files.items())
    path = d / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, c in files.items():
            z.writestr(p, c)
        z.writestr(f"{dist}/RECORD", record + f"{dist}/RECORD,,\n")
    return path


@pytest.fixture
def house(tmp_path) -> Path:
    d = tmp_path / "house"
    d.mkdir()
    make_wheel(d, "huggingface_hub", "2.4.0", requires=("httpx2<3,>=2.0.0", 'tomli>=1.1.0; python_version < "3.11"',
                                                         'hf-xet<2,>=1.6; platform_machine == "x86_64"'))
    make_wheel(d, "httpx2", "2.16.2")
    make_wheel(d, "hf_xet", "1.8.0", tag="cp38-abi3-manylinux2014_x86_64")
    make_wheel(d, "Typing_Extensions", "4.16.0")
    return d


def pip_env() -> dict:
    """The controller's pip with NO configuration (this machine's pip.conf adds find-links and extra indexes,
    which would let pip find the wheel elsewhere): only the index given on the command line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def test_simple_index_serves_the_wheelhouse_to_pip(house, tmp_path):
    out = tmp_path / "dl"
    with wheelhouse.WheelhouseServer([house]) as server:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir",
                               "--index-url", f"http://127.0.0.1:{server.port}/simple", "huggingface_hub==2.4.0",
                               "--no-deps", "-d", str(out)], env=pip_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "/files/huggingface_hub-2.4.0-py3-none-any.whl" in server.requests
        assert server.files_served() == 1
    got = out / "huggingface_hub-2.4.0-py3-none-any.whl"
    assert got.read_bytes() == (house / got.name).read_bytes()


def test_simple_index_pages(house):
    with wheelhouse.WheelhouseServer([house, house]) as server:  # a file in two dirs is listed once
        base = f"http://127.0.0.1:{server.port}"
        root = urllib.request.urlopen(f"{base}/simple/").read().decode()
        for project in ("huggingface-hub", "httpx2", "hf-xet", "typing-extensions"):
            assert f'<a href="{project}/">' in root
        page = urllib.request.urlopen(f"{base}/simple/Huggingface_Hub/").read().decode()  # PEP 503 normalization
        digest = hashlib.sha256((house / "huggingface_hub-2.4.0-py3-none-any.whl").read_bytes()).hexdigest()
        assert page.count("<a ") == 1
        assert f'href="../../files/huggingface_hub-2.4.0-py3-none-any.whl#sha256={digest}"' in page
        assert 'data-requires-python="&gt;=3.10"' in page
        redirected = urllib.request.urlopen(f"{base}/simple/httpx2")  # no trailing slash: 301 to the page
        assert redirected.geturl().endswith("/simple/httpx2/")
        for missing in ("/simple/requests/", "/files/nope-1.0-py3-none-any.whl", "/etc/passwd"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + missing)
            assert e.value.code == 404
    assert server.index_url_for("10.0.2.2") == f"http://10.0.2.2:{server.port}/simple"


def test_dependency_closure_uses_the_guests_markers(house):
    assert wheelhouse.missing_requirements(house, "huggingface_hub==2.4.0", "x86_64") == []
    # aarch64: hf-xet's marker is false there, so no wheel is needed for it
    assert wheelhouse.missing_requirements(house, "huggingface_hub==2.4.0", "aarch64") == []
    (house / "httpx2-2.16.2-py3-none-any.whl").unlink()
    assert wheelhouse.missing_requirements(house, "huggingface_hub==2.4.0", "x86_64") == ["httpx2<3,>=2.0.0"]
    assert wheelhouse.missing_requirements(house, "huggingface_hub==2.5.0", "x86_64") == ["huggingface_hub==2.5.0"]


def test_download_is_for_the_guests_platform_and_cached_by_requirement(tmp_path, monkeypatch):
    assert wheelhouse.hub_client_requirement() == "huggingface_hub==2.4.0"  # specfleet's default
    args = wheelhouse.download_args("huggingface_hub==2.4.0", "x86_64", tmp_path)
    assert args[-1] == "huggingface_hub==2.4.0" and "--only-binary=:all:" in args
    assert args[args.index("--python-version") + 1] == "3.11" and args[args.index("--implementation") + 1] == "cp"
    platforms = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_36_x86_64" in platforms
    assert not any(p.startswith("manylinux_2_37") for p in platforms)  # Debian 12's glibc is 2.36
    assert wheelhouse.house_dir(tmp_path, "huggingface_hub==2.4.0", "x86_64") != \
        wheelhouse.house_dir(tmp_path, "huggingface_hub==2.5.0", "x86_64")

    calls = []

    def fake_download(requirement, arch, dest):
        calls.append((requirement, arch))
        make_wheel(dest, "huggingface_hub", "2.4.0")
        return subprocess.CompletedProcess([], 0, "", "")

    monkeypatch.setattr(wheelhouse, "_pip_download", fake_download)
    first = wheelhouse.prepare(tmp_path, "huggingface_hub==2.4.0", arches=("x86_64", "aarch64"))
    again = wheelhouse.prepare(tmp_path, "huggingface_hub==2.4.0", arches=("x86_64", "aarch64"))
    assert first.downloaded and not again.downloaded and first.dirs == again.dirs
    assert calls == [("huggingface_hub==2.4.0", "x86_64"), ("huggingface_hub==2.4.0", "aarch64")]
    assert first.arches == ("x86_64", "aarch64")
    assert not list((tmp_path / "wheelhouse").glob("*.tmp-*"))


def test_failed_download_falls_back_to_the_default_index_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(wheelhouse, "_pip_download", lambda r, a, d: subprocess.CompletedProcess(
        [], 1, "", "Looking in indexes: ...\nERROR: No matching distribution found for huggingface_hub==2.4.0\n"))
    said = []
    assert wheelhouse.prepare(tmp_path, "huggingface_hub==2.4.0", say=said.append) is None
    assert len(said) == 1 and "No matching distribution" in said[0] and "default index" in said[0]
    # an incomplete download (a dependency missing) is a failure too, and is not cached
    monkeypatch.setattr(wheelhouse, "_pip_download", lambda r, a, d: (
        make_wheel(d, "huggingface_hub", "2.4.0", requires=("httpx2>=2",)), subprocess.CompletedProcess([], 0, "", ""))[1])
    said.clear()
    assert wheelhouse.prepare(tmp_path, "huggingface_hub==2.4.0", say=said.append) is None
    assert len(said) == 1 and "no wheel for httpx2>=2" in said[0]
    assert not list((tmp_path / "wheelhouse").glob("*/.complete"))


def test_guest_pip_conf():
    assert lab.guest_pip_conf("http://10.0.2.2:41234/simple", lab.GUEST_CA_BUNDLE) == (
        "[global]\nindex-url = http://10.0.2.2:41234/simple\ntrusted-host = 10.0.2.2\n"
        "cert = /etc/ssl/certs/ca-certificates.crt\n")
    assert lab.guest_pip_conf("http://10.0.2.2:41234/simple") == (
        "[global]\nindex-url = http://10.0.2.2:41234/simple\ntrusted-host = 10.0.2.2\n")
    assert lab.guest_pip_conf(cert=lab.GUEST_CA_BUNDLE) == "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n"


class FakeGuest:
    def __init__(self, name, arch=None):
        self.name, self.calls = name, []
        if arch:
            self.arch = arch

    def ssh(self, cmd, input=None, **kw):
        self.calls.append((cmd, input))
        return subprocess.CompletedProcess([], 0, "", "")


class FakeFleet:
    def __init__(self, guests):
        self.guests = guests

    def _parallel(self, fn, guests=None):
        return {g.name: fn(g) for g in (guests or self.guests)}


def test_configure_guest_pip_writes_pip_conf_atomically_where_asked():
    a, b = FakeGuest("spark-1"), FakeGuest("spark-2", arch="riscv64")
    fleet = FakeFleet([a, b])
    mirrored = [g for g in fleet.guests if wheelhouse.guest_arch(g) in wheelhouse.ARCHES]
    assert mirrored == [a] and wheelhouse.guest_arch(FakeGuest("x", arch="arm64")) == "aarch64"
    assert lab.configure_guest_pip(fleet, "http://10.0.2.2:5000/simple", cert=True, guests=mirrored) == ["spark-1"]
    (cmd, text), = a.calls
    assert "/etc/pip.conf" in cmd and "mv -f" in cmd and not b.calls
    assert text.decode() == lab.guest_pip_conf("http://10.0.2.2:5000/simple", lab.GUEST_CA_BUNDLE)
    assert lab.configure_guest_pip(fleet, None, cert=False) == [] and len(a.calls) == 1
    assert lab.configure_guest_pip(fleet, "http://10.0.2.2:5000/simple", cert=False, guests=[]) == []
    assert len(a.calls) == 1 and not b.calls  # an empty list is no guest, not every guest


def test_phase_clock_per_module_and_session_work():
    now = [0.0]
    clock = PhaseClock(clock=lambda: now[0])
    # first VM test: its setup boots the fleet (100 s, needing the hub: 2 s) then the test takes 10 s
    clock.item_start("tests/vm/test_ci_sequence.py")
    with clock.session_work("session setup: vm_fleet"):
        now[0] += 98
        with clock.session_work("session setup: hub"):
            now[0] += 2
    now[0] += 10
    clock.item_end()
    clock.item_start("tests/vm/test_ci_sequence.py")
    now[0] += 5
    clock.item_end()
    now[0] += 300  # other tiers run here: not counted
    clock.item_start("tests/vm/test_rollout.py")
    now[0] += 20
    with clock.session_work("session teardown: fleet down"):
        now[0] += 7
    clock.item_end()
    rows = {p.name: (p.kind, p.tests, p.seconds) for p in clock.rows()}
    assert rows == {"session setup: vm_fleet": ("session", 0, 98.0), "session setup: hub": ("session", 0, 2.0),
                    "session teardown: fleet down": ("session", 0, 7.0),
                    "tests/vm/test_ci_sequence.py": ("module", 2, 15.0), "tests/vm/test_rollout.py": ("module", 1, 20.0)}
    assert [p.kind for p in clock.rows()] == ["session"] * 3 + ["module"] * 2
    assert clock.vm_tier_seconds() == 142.0 == sum(p.seconds for p in clock.rows())
    assert clock.span_seconds() == 442.0
    table = clock.table()
    assert table[-1].split()[-1] == "142.0" and "VM tier total (wall)" in table[-1]
    assert any("tests/vm/test_ci_sequence.py" in line and line.split()[-2:] == ["2", "15.0"] for line in table)
    assert PhaseClock().table() == []


def test_load_image_streams_into_docker_import(tmp_path, monkeypatch):
    tarball = tmp_path / "rootfs.tar"
    tarball.write_bytes(b"x" * 1000)
    calls = []

    def fake_run(argv, stdin=None, **kw):
        calls.append((argv, stdin.name, stdin.read()))
        return subprocess.CompletedProcess(argv, 0, b"sha256:abc\n", b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    guests = [QemuHost(name=f"spark-{i}", ssh_port=2220 + i, overlay=tmp_path / f"{i}.qcow2", pidfile=tmp_path / f"{i}.pid",
                    console_log=tmp_path / f"{i}.log", key_path=tmp_path / "key", argv=[]) for i in (1, 2)]
    fleet = Fleet(guests=guests, workdir=tmp_path, inventory_path=tmp_path / "inv.yml", key_path=tmp_path / "key")
    seconds = fleet.load_image(tarball, "specfleet/x:1", changes=["ENV A=b c", 'CMD ["/bin/sh"]'])
    assert set(seconds) == {"spark-1", "spark-2"} and len(calls) == 2
    for argv, name, data in calls:
        assert "spark@127.0.0.1" in argv and name == str(tarball) and data == b"x" * 1000  # the tarball is stdin
        assert argv[-1] == as_user("root", "docker import --change 'ENV A=b c' --change 'CMD [\"/bin/sh\"]' "
                                            "- specfleet/x:1")
        assert "cat >" not in argv[-1] and "/var/tmp" not in argv[-1]  # no copy on the guest's disk

    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, b"", b"no space"))
    with pytest.raises(VMError, match="docker import .* failed .*no space"):
        fleet.load_image(tarball, "specfleet/x:1")
