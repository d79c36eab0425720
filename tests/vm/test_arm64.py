"""The CI sequence on arm64 guests (a DGX Spark is aarch64): Debian 12 arm64 QEMU guests (kernel: a kernel of
the Spark's architecture, emulated), the trtllm-serve stand-in built for arm64, then converge eagle3 ->
idempotence (second run: 0 changes) -> verify (the testinfra suite) -> cleanup, exactly as on the x86_64 fleet.

The module has its own fleet (SPECFLEET_VM_ARM64_ARCHES, default `arm64`: one guest; e.g. `x86_64,arm64` for a
mixed fleet), booted in a temporary workdir and always torn down (also on SIGTERM: tests/conftest.py turns it into
KeyboardInterrupt and pytest runs the finalizers). Its image and stand-in tar are built by the background build
that tests/vm/conftest.py starts with the session (lab.Prebuild), overlapping the x86_64 modules; the module runs
last and joins it. Boot and converge times per architecture are printed as figures (never asserted)."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

import specfleet_lab
from specfleet_lab import OPERATOR
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.conftest import PREBUILDS, cache_dir, driver_of, figure, paused_session_fleet, start_prebuild
from tests.vm.hub_standin import STANDIN_TOKEN

pytestmark = [pytest.mark.vm, pytest.mark.kernel("arm64")]

ARCH = "arm64"
STATE: dict = {}


def fleet_arches() -> list[str]:
    arches = specfleet_lab.parse_arches(os.environ.get("SPECFLEET_VM_ARM64_ARCHES") or ARCH)
    assert ARCH in arches, "this module's fleet needs at least one arm64 guest"
    return arches


@pytest.fixture(scope="module")
def arm64_fleet(tmp_path_factory, request, standins):
    hub, wheelhouse = standins.hub, standins.wheelhouse
    arches = fleet_arches()
    # this module runs last: the session's x86_64 guests sit idle meanwhile, so their CPUs are stopped
    # (resumed at module teardown, also on failure or SIGTERM)
    pause = contextlib.ExitStack()
    pause.enter_context(paused_session_fleet())
    request.addfinalizer(pause.close)
    prebuild = PREBUILDS.get(ARCH) or start_prebuild(ARCH, request.config)
    built = prebuild.join()
    figure(f"{ARCH}: guest image build " + ("(cold, background)" if built["image_built"] else "(cached)"),
           f"{built['image_s']:.1f} s")
    figure(f"{ARCH}: stand-in rootfs tar build " + ("(cold, background)" if built["standin_built"] else "(cached)"),
           f"{built['standin_s']:.1f} s")
    ran = built["image_s"] + built["standin_s"]
    figure(f"{ARCH}: background build: ran / this module waited for it / overlapped the other modules",
           f"{ran:.1f} s / {prebuild.waited_s:.1f} s / {max(0.0, ran - prebuild.waited_s):.1f} s")

    workdir = tmp_path_factory.mktemp(f"fleet-{ARCH}")
    start = time.monotonic()
    try:
        fleet = specfleet_lab.up(count=len(arches), arch=arches, workdir=workdir, cache_dir=cache_dir(),
                                 driver=driver_of(request))
    except BaseException:
        specfleet_lab.down(workdir)
        raise
    try:
        figure(f"{ARCH} fleet ({','.join(arches)}): boot to SSH + systemd running", f"{time.monotonic() - start:.1f} s")
        for g in fleet.guests:
            figure(f"boot to SSH + systemd running: {g.name} ({g.arch}, smp {fleet.timings['smp']})",
                   f"{fleet.timings['boot_s_per_guest'][g.name]:.1f} s")
        t0 = time.monotonic()
        n_cas = lab.trust_controller_cas(fleet)
        mirrored = [g for g in fleet.guests if wheelhouse and wheelhouse_mod.guest_arch(g) in wheelhouse.arches]
        index_url = wheelhouse.index_url_for(fleet.controller_address) if wheelhouse else None
        lab.configure_guest_pip(fleet, index_url, cert=n_cas > 0, guests=mirrored)
        figure(f"{ARCH} fleet: prepare: controller CAs ({n_cas}) + pip mirror", f"{time.monotonic() - t0:.1f} s")
        seconds = lab.load_standin_image(fleet, cache_dir())
        figure(f"{ARCH} fleet: load stand-in image per guest (streamed into docker import -)",
               ", ".join(f"{name} {s:.1f} s" for name, s in sorted(seconds.items())))
        inventory = lab.write_ci_inventory(fleet, hub.port, workdir / "ci-inventory.yml")
        figure(f"{ARCH} fleet: prepare (CAs, pip mirror, stand-in image, CI inventory + lock)",
               f"{time.monotonic() - t0:.1f} s")
        yield fleet, inventory
    finally:
        specfleet_lab.down(workdir)


def test_the_guests_are_arm64_with_an_arm64_standin(arm64_fleet):
    fleet, _ = arm64_fleet
    for g in fleet.guests:
        machine = specfleet_lab.ARCHES[g.arch].machine
        assert g.ssh("uname -m", user=OPERATOR).stdout.strip() == machine
        assert g.ssh("dpkg --print-architecture", user=OPERATOR).stdout.strip() == specfleet_lab.ARCHES[g.arch].debian
        # the stand-in image's own python runs natively (the guest has no qemu-user: a foreign-arch image would
        # fail with "exec format error")
        out = g.ssh(f"docker run --rm --entrypoint python3 {lab.STANDIN_TAG} -c "
                    "'import platform; print(platform.machine())'").stdout.strip()
        assert out == machine, out
        assert g.ssh("systemctl is-active docker ssh", user=OPERATOR).stdout.split() == ["active", "active"]
    assert ARCH in {g.arch for g in fleet.guests}


def test_converge_eagle3(arm64_fleet):
    fleet, inventory = arm64_fleet
    run = lab.run_pyinfra(inventory, "eagle3", "-v", json_out=False)
    assert run.returncode == 0, run.output()[-4000:]
    assert STANDIN_TOKEN not in run.output()
    STATE["first"] = run.seconds
    figure(f"{ARCH} fleet: first converge eagle3 ({','.join(g.arch for g in fleet.guests)})", f"{run.seconds:.1f} s")
    for g in fleet.guests:
        answer = lab.guest_curl_completion(g)
        assert answer["choices"][0]["text"].strip()


def test_idempotence(arm64_fleet):
    fleet, inventory = arm64_fleet
    before = {g.name: g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()
              for g in fleet.guests}
    run = lab.run_pyinfra(inventory, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]
    assert run.result is not None, "no pyinfra JSON result: cannot tell what changed"
    assert run.changed == {}, f"second converge changed: {run.changed}"
    after = {g.name: g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()
             for g in fleet.guests}
    assert after == before, "the container was restarted"
    figure(f"{ARCH} fleet: second converge eagle3 (no change)", f"{run.seconds:.1f} s")


def test_verify(arm64_fleet):
    _, inventory = arm64_fleet
    proc = lab.run_infra_suite(inventory)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_cleanup(arm64_fleet):
    fleet, inventory = arm64_fleet
    run = lab.run_pyinfra(inventory, "cleanup")
    assert run.returncode == 0, run.output()[-4000:]
    for g in fleet.guests:
        state = g.ssh("systemctl is-active specfleet-trtllm; systemctl is-enabled specfleet-trtllm",
                      check=False).stdout.split()
        assert state == ["inactive", "disabled"], state
        assert g.ssh("docker ps -aq --filter name=specfleet-trtllm").stdout.strip() == ""
