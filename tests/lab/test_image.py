"""One recipe, two outputs: the QEMU disk and the container image of the host image hold the same installed packages,
at the same versions (the container hook changes files, never packages), and the container image has no kernel."""

from __future__ import annotations

import subprocess
import tarfile

import pytest

import specfleet_lab

pytestmark = pytest.mark.vm  # builds the image when the cache does not have it (minutes)


def packages(status: str) -> dict[str, str]:
    """dpkg's status file as {package:arch: version} of the installed packages."""
    out = {}
    for stanza in status.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Status") == "install ok installed":
            out[f"{fields['Package']}:{fields.get('Architecture', '')}"] = fields["Version"]
    return out


# the pair's image (OpenMPI beside the rest) is built only for the pair's --full scenario: so is its comparison
@pytest.mark.parametrize("pair", [False, pytest.param(True, marks=pytest.mark.full)], ids=["session", "pair"])
def test_the_disk_and_the_container_image_have_the_same_packages(pair):
    info = specfleet_lab.build_image(arch=specfleet_lab.host_arch(), pair=pair)
    disk = subprocess.run(["debugfs", "-R", "cat /var/lib/dpkg/status", str(info.disk)], capture_output=True,
                          text=True, check=True).stdout
    with tarfile.open(info.container_tar) as tar:
        container = tar.extractfile("./var/lib/dpkg/status").read().decode()
        names = tar.getnames()
    on_disk, in_container = packages(disk), packages(container)
    assert len(on_disk) > 100 and on_disk == in_container, set(on_disk.items()) ^ set(in_container.items())
    assert not [n for n in names if n.startswith(("./boot/vmlinuz", "./lib/modules/", "./usr/lib/modules/"))]
    assert "./usr/local/bin/runc-container-host-STANDIN" in names  # the container output's own files


def test_the_status_parser_reads_installed_packages_only():
    status = ("Package: a\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1\n\n"
              "Package: b\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 2\n")
    assert packages(status) == {"a:amd64": "1"}
