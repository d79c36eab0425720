"""The lab's hosts themselves, on each driver, through the seam only (specfleet_lab.Host, Fleet): real systemd
hosts that stand in for DGX Sparks. The container driver's in CI (seconds); the QEMU driver's in --full (minutes
under TCG; the arm64 module boots QEMU in CI). The checks of the image's content (`image_content`) run on the first
driver only: one rootfs makes both outputs (tests/lab/test_image.py compares their packages), and the QEMU modules
converge on the disk. The image is taken from the shared cache (SPECFLEET_CACHE_DIR or
~/.cache/specfleet) and built there if missing; SPECFLEET_VM_TEST_COLD=1 builds into a fresh cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

import specfleet_lab
from specfleet_lab import OPERATOR

pytestmark = [pytest.mark.vm]
DRIVERS = ["container", pytest.param("qemu", marks=pytest.mark.full)]

FIGURES: dict[str, object] = {}


def _report(config) -> None:
    """Hand the figures to the VM tier's summary table if there is one, else print them."""
    try:
        from tests.vm.conftest import figure
    except ImportError:
        figure = None
    if figure is not None:
        for name, value in FIGURES.items():
            figure(f"vm fleet: {name}", str(value))
        return
    capman = config.pluginmanager.get_plugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    with ctx:
        print("\nVM fleet figures:\n" + "\n".join(f"  {k}: {v}" for k, v in FIGURES.items()))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    if os.environ.get("SPECFLEET_VM_TEST_COLD"):
        return tmp_path_factory.mktemp("vm-cache")
    return specfleet_lab.default_cache_dir()


@pytest.fixture(scope="module", params=DRIVERS)
def driver(request):
    """Each driver in turn (a driver of its own, closed after the module's tests of it)."""
    drv = specfleet_lab.choose(request.param, arches=["x86_64"], session=True)
    yield drv
    drv.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, driver) -> Path:
    return tmp_path_factory.mktemp(f"fleet-{driver.name}")


@pytest.fixture(scope="module")
def fleet(workdir, cache_dir, driver, request):
    t0 = time.monotonic()
    try:
        f = specfleet_lab.up(count=2, workdir=workdir, cache_dir=cache_dir, lan=True, driver=driver)
        FIGURES[f"{driver.name}: up(2) total s"] = round(time.monotonic() - t0, 1)
        FIGURES.update({f"{driver.name}: up(2) {k}": v for k, v in f.timings.items() if k != "states"})
        yield f
    finally:
        specfleet_lab.down(workdir)  # even when a test (or up itself) failed
        assert driver.leftovers(workdir) == []
        _report(request.config)


@pytest.fixture
def image_content(request):
    """A check of what the image holds rather than of the driver: made once, on the first driver's hosts (the
    container driver's, or QEMU where containers cannot run)."""
    if request.node.callspec.params["driver"] != DRIVERS[0]:
        pytest.skip("the image's content: checked on the first driver's hosts (one rootfs makes both outputs)")


def test_guests_answer_ssh_and_systemd_is_up(fleet):
    assert [g.name for g in fleet.guests] == ["spark-1", "spark-2"]
    assert len({(g.ssh_host, g.ssh_port) for g in fleet.guests}) == 2
    for g in fleet.guests:
        assert g.is_running()
        state = g.ssh("systemctl is-system-running", check=False).stdout.strip()
        assert state in ("running", "degraded"), (g.name, state)


def test_guests_have_their_own_identity(fleet):
    hostnames = [g.ssh("hostname").stdout.strip() for g in fleet.guests]
    assert hostnames == ["spark-1", "spark-2"]
    ids = [g.ssh("cat /etc/machine-id").stdout.strip() for g in fleet.guests]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
    assert ids[0] != ids[1]
    hostkeys = [g.ssh("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
                for g in fleet.guests]
    assert hostkeys[0] != hostkeys[1]
    # the hostname resolves (sudo and many tools look it up)
    fleet.guests[0].ssh("getent hosts $(hostname)")


def test_guest_has_what_a_deploy_relies_on(fleet, image_content):
    g = fleet.guests[0]
    g.ssh("set -e; command -v curl ss sha256sum df journalctl systemctl sudo python3 docker; "
          "python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'; "
          "curl --version >/dev/null; ss -ltn | grep -q ':22 '; echo x | sha256sum; df -h /; "
          "journalctl -b -n 1 --no-pager; test -s /etc/resolv.conf")


def test_spark_user_has_sudo_but_not_docker(fleet, image_content):
    g = fleet.guests[0]
    ident = g.ssh("id", user="spark").stdout
    assert "uid=1000(spark)" in ident and "docker" not in ident
    assert g.ssh("getent passwd spark").stdout.strip().endswith(":/bin/bash")
    assert g.ssh("sudo -n id -u", user="spark").stdout.strip() == "0"
    assert "Server Version" in g.ssh("docker info").stdout  # root can use docker
    r = g.ssh("sudo -u spark docker ps", check=False)
    assert r.returncode != 0 and "permission denied" in r.stderr.lower(), r


def test_root_cannot_log_in_over_ssh(fleet, image_content):
    """As on DGX OS: the operator logs in, root does not (everything privileged goes through sudo)."""
    g = fleet.guests[0]
    argv = [*g.ssh_base(connect_timeout=10), f"root@{g.ssh_host}", "true"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 255 and "permission denied" in r.stderr.lower(), r
    assert g.ssh("sshd -T 2>/dev/null | grep -i '^permitrootlogin'").stdout.split() == ["permitrootlogin", "no"]
    assert g.ssh("id -un").stdout.strip() == "root"  # Host.ssh runs as root through the operator's sudo
    assert g.ssh("id -un", user=OPERATOR).stdout.strip() == "spark"


def test_docker_import_and_run(fleet, image_content, tmp_path):
    # a minimal rootfs collected inside a guest: dash and the libraries it links
    src = fleet.guests[0]
    src.ssh("set -e; d=$(mktemp -d); "
            "for f in /usr/bin/dash $(ldd /usr/bin/dash | grep -o '/[^ ]*'); do "
            "  mkdir -p \"$d$(dirname $f)\"; cp -L \"$f\" \"$d$f\"; done; "
            "tar -C \"$d\" -cf /tmp/mini.tar . && rm -rf \"$d\"")
    tarball = tmp_path / "mini.tar"
    src.get("/tmp/mini.tar", tarball)
    assert tarball.stat().st_size > 100_000
    seconds = fleet.load_image(tarball, "specfleet/mini:test",
                               changes=['CMD ["/usr/bin/dash", "-c", "echo container-ok"]'])
    FIGURES["load_image s"] = {k: round(v, 1) for k, v in seconds.items()}
    assert set(seconds) == {"spark-1", "spark-2"}
    for g in fleet.guests:
        t0 = time.monotonic()
        assert g.ssh("docker run --rm specfleet/mini:test").stdout.strip() == "container-ok"
        FIGURES[f"docker run {g.name} s"] = round(time.monotonic() - t0, 1)
        out = g.ssh("docker run --rm specfleet/mini:test /usr/bin/dash -c 'echo $((6*7))'")
        assert out.stdout.strip() == "42"


def test_standin_nvidia_toolkit_gives_docker_the_gpu_code_path(fleet, image_content):
    """The documented stand-in (lab/specfleet_lab/hooks/customize.sh): docker has a runtime named nvidia, and
    `--gpus=all` works (the prestart hook is found and run) without any GPU. Uses the image test_docker_import_and_run loaded."""
    g = fleet.guests[0]
    runtimes = json.loads(g.ssh("docker info --format '{{json .Runtimes}}'").stdout)
    assert runtimes["nvidia"]["path"] == "/usr/local/bin/nvidia-container-runtime-STANDIN"
    assert "STAND-IN" in g.ssh("nvidia-container-runtime-hook --version").stdout
    out = g.ssh("docker run --rm --gpus=all specfleet/mini:test /usr/bin/dash -c 'echo gpus-ok'")
    assert out.stdout.strip() == "gpus-ok"
    out = g.ssh("docker run --rm --runtime=nvidia --gpus=all specfleet/mini:test /usr/bin/dash -c 'echo runtime-ok'")
    assert out.stdout.strip() == "runtime-ok"
    g.ssh("docker create --name sf-gpus --gpus=all specfleet/mini:test >/dev/null")
    try:
        hc = json.loads(g.ssh("docker inspect --format '{{json .HostConfig}}' sf-gpus").stdout)
    finally:
        g.ssh("docker rm -f sf-gpus >/dev/null", check=False)
    assert [r["Capabilities"] for r in hc["DeviceRequests"]] == [[["gpu"]]] and hc["DeviceRequests"][0]["Count"] == -1


def test_guests_reach_each_other_on_the_shared_network(fleet):
    """A second NIC (eth1) on the fleet's shared network with a fixed address (.11, .12); the first (SSH from the
    controller, the default route) is untouched."""
    a, b = fleet.guests
    assert [a.lan_address.rsplit(".", 1)[1], b.lan_address.rsplit(".", 1)[1]] == ["11", "12"]
    for g in (a, b):  # no DHCP left waiting on the shared network: boot reaches `running`, not `degraded`
        assert g.ssh("systemctl is-system-running", check=False).stdout.strip() == "running", g.name
    for g in (a, b):
        shown = g.ssh("ip -4 -o addr show dev eth1").stdout
        assert f"inet {g.lan_address}/24" in shown, shown
    there = a.ssh(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{b.lan_address}/22' && echo open", check=False)
    assert there.stdout.strip() == "open", there
    sshd = b.ssh(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{a.lan_address}/22' && echo open", check=False)
    assert sshd.stdout.strip() == "open", sshd
    assert "eth1" not in a.ssh("ip route show default").stdout  # the default route stays on the first NIC


def test_inventory_and_fleet_json(fleet):
    inv = yaml.safe_load(fleet.inventory_path.read_text())
    v = inv["all"]["vars"]
    assert v["ssh_user"] == "spark" and v["_sudo"] is True and Path(v["ssh_key"]).is_file()
    assert v["ssh_known_hosts_file"] == "/dev/null"
    assert v["ssh_strict_host_key_checking"] == "no"
    hosts = inv["all"]["children"]["vm_fleet"]["hosts"]
    assert hosts == {g.name: {"ssh_hostname": g.ssh_host, "ssh_port": g.ssh_port, "fleet_address": g.lan_address}
                     for g in fleet.guests}
    again = specfleet_lab.load(fleet.workdir)  # another process re-attaches via fleet.json
    assert [(g.name, g.ssh_host, g.ssh_port) for g in again.guests] == [(g.name, g.ssh_host, g.ssh_port)
                                                                         for g in fleet.guests]
    assert again.driver.name == fleet.driver.name
    assert again.guests[1].ssh("hostname").stdout.strip() == "spark-2"


def test_a_host_powers_off_boots_pauses_and_resumes(fleet):
    """Power through the seam: off (nothing gets to shut down), on again with the same disk, addresses and SSH
    endpoint; frozen (no answer) and thawed (the same session's host answers again)."""
    g = fleet.guests[1]
    g.ssh("echo kept > /var/lib/specfleet-power-test && sync")  # a hard power-off loses what is not on disk
    g.poweroff()
    assert not g.is_running()
    g.poweroff()  # already off: a no-op
    g.boot(wait=True)
    assert g.is_running() and g.ssh("cat /var/lib/specfleet-power-test").stdout.strip() == "kept"
    assert f"inet {g.lan_address}/24" in g.ssh("ip -4 -o addr show dev eth1").stdout
    fleet.pause()
    try:
        answered = g.ssh("true", check=False, timeout=20, connect_timeout=5).returncode == 0
    except specfleet_lab.VMError:  # timed out: nothing answered
        answered = False
    finally:
        fleet.resume()
    assert not answered and g.ssh("echo thawed").stdout.strip() == "thawed"
    assert g.console()  # what it printed while booting, for a failure's message


def test_down_is_complete_and_idempotent(fleet, workdir):
    assert fleet.driver.leftovers(workdir)
    specfleet_lab.down(workdir)
    assert fleet.driver.leftovers(workdir) == []
    assert not (workdir / "fleet.json").exists()
    specfleet_lab.down(workdir)  # twice
    specfleet_lab.down(workdir / "never-used")  # nothing up at all
    with pytest.raises(specfleet_lab.VMError):
        specfleet_lab.load(workdir)
