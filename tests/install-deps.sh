#!/usr/bin/env bash
# Everything the tests and the local try-it fleet need, on a fresh Debian/Ubuntu machine (run as root).
# arm64 guests (specfleet-lab up --arch arm64, tests/vm/test_arm64.py): qemu-system-aarch64 boots them, and their
# images (and the arm64 trtllm-serve stand-in) are built by mmdebstrap through qemu-user, which needs
# binfmt_misc mounted and qemu-aarch64 registered (qemu-user-static + binfmt-support).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root (apt-get, qemu, mmdebstrap)" >&2; exit 1; fi
if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
need=()
for pkg in qemu-system-x86 qemu-system-arm qemu-user-static binfmt-support qemu-utils mmdebstrap e2fsprogs \
           openssh-client openssh-server sudo curl ca-certificates haproxy openmpi-bin python3-mpi4py python3-yaml; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need[*]}"
  apt-get update -qq
  # haproxy: the gateway's engine, run by tests/unit/test_gateway_files.py; openssh-server: the pair worker's sshd,
  # run by tests/unit/test_pair_ssh.py (policy-rc.d: installed, not started); sudo: visudo reads the pair's sudoers
  # rule in tests/unit/test_pair_files.py; openmpi-bin, python3-mpi4py, python3-yaml (the system python3's): real
  # mpirun runs the trtllm-serve stand-in's two ranks in tests/vm/test_trtllm_standin_pair.py
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
if [ "$(uname -m)" != aarch64 ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  # the package's postinst registers it when binfmt_misc is mounted; without systemd, do it here
  update-binfmts --enable qemu-aarch64 2>/dev/null || true
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    echo "install-deps: qemu-aarch64 is not registered in binfmt_misc; arm64 images cannot be built" >&2
    exit 1
  fi
fi
# this package with its test extra, and the VM lab (lab/: the `specfleet-lab` distribution and command, outside
# the runtime wheel)
python3 -m pip install -q --disable-pip-version-check -e ".[test]" -e ./lab
