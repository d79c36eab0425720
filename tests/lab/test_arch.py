"""Guest architectures of the VM fleet (x86_64, arm64), without booting anything: parsing `--arch`, one image
recipe per architecture, the QEMU command line per guest, the accelerator, the inventory and fleet.json."""

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from specfleet.fleet.inventory import load_inventory
from specfleet_lab import Fleet, ImageInfo, VMError, cli, guest_arches, recipe, write_inventory
from specfleet_lab.arch import qemu_binary
from specfleet_lab.qemu import accel
from specfleet_lab.qemu.guest import QemuHost, qemu_argv
from tests.vm import wheelhouse
from tests.vm.trtllm_standin import image as standin_image


def guest(arch: str, tmp_path: Path, name: str = "spark-1", port: int = 2222) -> QemuHost:
    return QemuHost(name=name, ssh_port=port, overlay=tmp_path / f"{name}.qcow2", pidfile=tmp_path / f"{name}.pid",
                 console_log=tmp_path / f"{name}.log", key_path=tmp_path / "id", argv=[], arch=arch)


@pytest.mark.parametrize("spec, count, expected", [
    (None, None, ["x86_64"] * 3),
    ("arm64", None, ["arm64"] * 3),
    ("aarch64", 1, ["arm64"]),
    ("x86_64,arm64", None, ["x86_64", "arm64"]),
    ("amd64, aarch64", 2, ["x86_64", "arm64"]),
    (["arm64", "x86_64", "arm64"], None, ["arm64", "x86_64", "arm64"]),
])
def test_guest_arches(spec, count, expected):
    assert guest_arches(count, spec) == expected


@pytest.mark.parametrize("spec, count, message", [
    ("sparc", None, "unknown guest architecture 'sparc'"),
    ("x86_64,,arm64", None, "comma-separated list"),
    ("x86_64,arm64", 3, "--count 3 does not match the 2 architectures"),
    ("arm64", 0, "count must be >= 1"),
])
def test_bad_arches_are_one_clear_error(spec, count, message):
    with pytest.raises(VMError, match=message.replace("(", r"\(")):
        guest_arches(count, spec)


def test_the_recipe_and_its_hash_differ_per_arch():
    x86, arm = recipe.recipe("x86_64"), recipe.recipe("arm64")
    assert "linux-image-cloud-amd64" in x86["packages"] and "linux-image-arm64" not in x86["packages"]
    assert "linux-image-arm64" in arm["packages"] and "linux-image-cloud-amd64" not in arm["packages"]
    assert arm["arch"] == "arm64" and "MODULES=list" in arm["essential_hook"]
    assert recipe.recipe_hash("x86_64") != recipe.recipe_hash("arm64")
    assert recipe.recipe_hash() == recipe.recipe_hash("x86_64") == recipe.recipe_hash("amd64")
    assert recipe.recipe_hash("aarch64") == recipe.recipe_hash("arm64")
    # the x86_64 recipe is the one from before arm64 guests: cached x86_64 images stay valid
    assert "arch" not in x86 and "essential_hook" not in x86
    # only the kernel differs in the package list
    assert [p for p in x86["packages"] if "linux-image" not in p] == [p for p in arm["packages"] if "linux-image" not in p]


@pytest.mark.parametrize("machine,own,emulated", [("x86_64", "x86_64", "arm64"), ("aarch64", "arm64", "x86_64")])
def test_only_the_machines_own_arch_hashes_the_container_output(monkeypatch, machine, own, emulated):
    """The build makes a container output for the machine's own architecture only: an emulated architecture's image
    (an arm64 build takes about 20 minutes here) is not rebuilt for a change to the container hook."""
    monkeypatch.setattr(recipe, "host_arch", lambda: own)
    assert "container_hook" in recipe.recipe(own) and "container_files" in recipe.recipe(own)
    assert "container_hook" not in recipe.recipe(emulated) and "container_files" not in recipe.recipe(emulated)
    before = recipe.recipe_hash(own), recipe.recipe_hash(emulated)
    monkeypatch.setattr(recipe, "CONTAINER_HOOK", recipe.CONTAINER_HOOK + "\n# changed\n")
    assert recipe.recipe_hash(own) != before[0] and recipe.recipe_hash(emulated) == before[1]


def test_initramfs_hook_is_valid_shell_and_writes_no_conffile(tmp_path):
    import subprocess
    subprocess.run(["sh", "-n"], input=recipe.INITRAMFS_HOOK, text=True, check=True)
    subprocess.run(["sh", "-c", recipe.INITRAMFS_HOOK, "hook", str(tmp_path)], check=True)
    conf = (tmp_path / "etc/initramfs-tools/conf.d/specfleet-vm.conf").read_text()
    assert "MODULES=list" in conf and "COMPRESS=gzip" in conf
    hook = tmp_path / "etc/initramfs-tools/hooks/specfleet-virtio"
    assert hook.stat().st_mode & 0o111 and "virtio_blk" in hook.read_text() and "ext4" in hook.read_text()
    subprocess.run(["sh", "-n", str(hook)], check=True)
    # /etc/initramfs-tools/modules and initramfs.conf are initramfs-tools conffiles: dpkg would ask about them
    assert not (tmp_path / "etc/initramfs-tools/modules").exists()
    assert not (tmp_path / "etc/initramfs-tools/initramfs.conf").exists()


def test_qemu_argv_per_arch(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    x86 = qemu_argv(guest("x86_64", tmp_path), Path("/k"), Path("/i"), 2048, 1, "tcg", "spark-1")
    arm = qemu_argv(guest("arm64", tmp_path), Path("/k"), Path("/i"), 2048, 2, "tcg", "spark-1")
    assert x86[0] == "/usr/bin/qemu-system-x86_64" and "-M" not in x86
    assert "console=ttyS0" in x86[x86.index("-append") + 1]
    assert arm[0] == "/usr/bin/qemu-system-aarch64"
    assert arm[arm.index("-M") + 1] == "virt"
    assert arm[arm.index("-cpu") + 1].startswith("max")
    append = arm[arm.index("-append") + 1]
    assert "console=ttyAMA0" in append and "root=/dev/vda" in append and "tsc=reliable" not in append
    assert arm[arm.index("-smp") + 1] == "2"
    assert "virtio-net-pci,netdev=n0" in arm and any("if=virtio" in a for a in arm)


def test_missing_qemu_binary_names_the_package(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(VMError, match="qemu-system-arm"):
        qemu_binary("arm64")


def test_a_foreign_arch_is_always_tcg(tmp_path, monkeypatch):
    monkeypatch.setattr(accel, "host_arch", lambda: "x86_64")
    monkeypatch.setenv("SPECFLEET_VM_ACCEL", "kvm")
    info = ImageInfo(dir=tmp_path, disk=tmp_path / "d", kernel=tmp_path / "k", initrd=tmp_path / "i",
                     key=tmp_path / "id", recipe_hash="h", built=False, cached=True, seconds=0, size_bytes=0,
                     arch="arm64")
    assert accel.choose_accel(info, tmp_path) == "tcg"
    info.arch = "x86_64"
    assert accel.choose_accel(info, tmp_path) == "kvm"  # the x86_64 path is unchanged (forced here)


def test_default_smp_per_arch(monkeypatch):
    monkeypatch.delenv("SPECFLEET_VM_SMP", raising=False)
    monkeypatch.setattr(accel.os, "sched_getaffinity", lambda pid: {0, 1})
    assert accel.default_smp(1, "arm64") == 2 and accel.default_smp(2, "arm64") == 1
    assert accel.default_smp(3, "x86_64") == 1
    with pytest.raises(VMError):
        accel.default_smp(1, "sparc")


def test_guest_json_roundtrip_keeps_the_arch(tmp_path):
    g = guest("arm64", tmp_path)
    back = QemuHost.from_json(g.to_json())
    assert back.arch == "arm64" and wheelhouse.guest_arch(back) == "aarch64"
    old = g.to_json()
    del old["arch"]  # fleet.json of a fleet brought up before arm64 guests
    assert QemuHost.from_json(old).arch == "x86_64"


def test_inventory_groups_guests_by_arch_and_loads(tmp_path):
    guests = [guest("x86_64", tmp_path, "spark-1", 2201), guest("arm64", tmp_path, "spark-2", 2202)]
    path = tmp_path / "inventory.yml"
    write_inventory(path, guests, tmp_path / "id")
    inv = yaml.safe_load(path.read_text())
    children = inv["all"]["children"]
    assert set(children["vm_fleet"]["hosts"]) == {"spark-1", "spark-2"}
    assert set(children["vm_arm64"]["hosts"]) == {"spark-2"} and set(children["vm_x86_64"]["hosts"]) == {"spark-1"}
    # no per-host data besides the connection (the arch is a group, not a CI-only data key)
    assert all(set(h) == {"ssh_hostname", "ssh_port"} for h in children["vm_fleet"]["hosts"].values())
    loaded = load_inventory(path)
    assert {h for h in loaded.hosts} >= {"spark-1", "spark-2"}


def test_standin_base_is_built_per_arch():
    assert standin_image.debian_arch("x86_64") == "amd64" and standin_image.debian_arch("aarch64") == "arm64"
    assert standin_image.base_recipe_key("arm64") != standin_image.base_recipe_key("amd64")
    assert standin_image.base_recipe_key("arm64") == standin_image.base_recipe_key("aarch64")
    assert "--architectures=arm64" in standin_image.mmdebstrap_args("aarch64")


def test_load_standin_image_streams_each_arch_its_own_tar(tmp_path, monkeypatch):
    from tests.vm import lab
    built = []
    monkeypatch.setattr(lab.standin_image, "build_rootfs_tarball",
                        lambda cache, mode, load_delay_s, arch, **kw: built.append(arch) or tmp_path / f"{arch}.tar")

    class FakeFleet:
        guests = [guest("x86_64", tmp_path, "spark-1"), guest("arm64", tmp_path, "spark-2"),
                  guest("x86_64", tmp_path, "spark-3")]
        loads = []

        def load_image(self, tarball, tag, changes, guests):
            self.loads.append((tarball.name, [g.name for g in guests]))
            return {g.name: 1.0 for g in guests}

    fleet = FakeFleet()
    seconds = lab.load_standin_image(fleet, tmp_path)
    assert sorted(built) == ["amd64", "arm64"]
    assert sorted(fleet.loads) == [("amd64.tar", ["spark-1", "spark-3"]), ("arm64.tar", ["spark-2"])]
    assert set(seconds) == {"spark-1", "spark-2", "spark-3"}


@pytest.mark.parametrize("args", [["up", "--arch", "sparc"], ["up", "--arch", "x86_64,arm64", "--count", "3"],
                                  ["build-image", "--arch", "mips"]])
def test_cli_bad_arch_is_one_line_without_traceback(args, tmp_path):
    result = CliRunner().invoke(cli.main, [*args, "--workdir", str(tmp_path)] if args[0] == "up" else args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert ("sparc" in errors[0] or "mips" in errors[0] or "does not match" in errors[0])


def test_cli_parses_a_mixed_fleet(monkeypatch, tmp_path):
    seen = {}

    def fake_up(**kw):
        seen.update(kw)
        gs = [guest(a, tmp_path, f"spark-{i}", 2200 + i) for i, a in enumerate(kw["arch"], start=1)]
        return Fleet(guests=gs, workdir=tmp_path, inventory_path=tmp_path / "inventory.yml", key_path=tmp_path / "id")

    monkeypatch.setattr(cli, "up", fake_up)
    result = CliRunner().invoke(cli.main, ["up", "--arch", "x86_64,arm64", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert seen["arch"] == ["x86_64", "arm64"] and seen["count"] == 2
    assert "spark-2\t127.0.0.1:2202\tarm64" in result.output


def test_vm_up_in_process_leaves_the_callers_sigterm_handler(monkeypatch, tmp_path):
    """`vm up` turns SIGTERM into SystemExit only while it runs: invoked in-process (as here), it must not leave
    that handler in the test run, whose own SIGTERM handling (tests/conftest.py) tears the VM fleet down."""
    import signal
    before = signal.getsignal(signal.SIGTERM)
    inside = {}

    def fake_up(**kw):
        inside["handler"] = signal.getsignal(signal.SIGTERM)
        return Fleet(guests=[guest("x86_64", tmp_path, "spark-1", 2201)], workdir=tmp_path,
                     inventory_path=tmp_path / "inventory.yml", key_path=tmp_path / "id")

    monkeypatch.setattr(cli, "up", fake_up)
    result = CliRunner().invoke(cli.main, ["up", "--workdir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert inside["handler"] is not before  # vm up's own while it ran
    assert signal.getsignal(signal.SIGTERM) is before
