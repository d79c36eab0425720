#!/usr/bin/env bash
# What the tests and the local try-it fleet need, on a fresh Debian/Ubuntu machine (run as root).
#   tests/install-deps.sh        everything the test tiers use
#   tests/install-deps.sh try    only what `bash tests/vm/try.sh` needs: the image build and the container lab
#   tests/install-deps.sh try --qemu   the same, with QEMU (try.sh --qemu)
# The container lab runs Debian's docker.io and lxcfs, started and stopped by the lab itself on its own socket
# (lab/specfleet_lab/container/engine.py): their services are never enabled or started here.
# arm64 guests (tests/vm/test_arm64.py): qemu-system-aarch64 boots them, and their images (and the arm64 trtllm-serve
# stand-in) are built by mmdebstrap through qemu-user, which needs binfmt_misc mounted and qemu-aarch64 registered
# (qemu-user-static + binfmt-support).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root (apt-get, the lab's engine, mmdebstrap)" >&2; exit 1; fi
profile=all; qemu=1
if [ "${1:-}" = try ]; then profile=try; qemu=0; [ "${2:-}" = --qemu ] && qemu=1; fi
# the image build, SSH to the hosts, the container lab
pkgs=(mmdebstrap e2fsprogs openssh-client curl ca-certificates docker.io lxcfs)
[ "$qemu" = 1 ] && pkgs+=(qemu-system-x86 qemu-utils)
if [ "$profile" = all ]; then
  # haproxy: the gateway's engine, run by tests/unit/test_gateway_files.py; openssh-server: the pair worker's sshd,
  # run by tests/unit/test_pair_ssh.py; sudo: visudo reads the pair's sudoers rule in tests/unit/test_pair_files.py;
  # openmpi-bin, python3-mpi4py, python3-yaml (the system python3's): real mpirun runs the trtllm-serve stand-in's
  # two ranks in tests/vm/test_trtllm_standin_pair.py; arm64: qemu-system-arm and qemu-user through binfmt_misc;
  # docker-registry and skopeo: the image registry's engine and fetch, run by tests/unit/test_image_registry.py and
  # tests/vm/test_registry_standin.py (installed, not started: policy-rc.d below)
  pkgs+=(qemu-system-arm qemu-user-static binfmt-support openssh-server sudo haproxy openmpi-bin python3-mpi4py
         python3-yaml docker-registry skopeo)
fi
need=()
for pkg in "${pkgs[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need[*]}"
  apt-get update -qq
  # policy-rc.d: installed, not started (docker.io, containerd, lxcfs, openssh-server, docker-registry)
  own_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
  fi
  # the engine without what Debian recommends beside it (iptables, git, needrestart, ...): the lab needs none of it
  engine=(); rest=()
  for pkg in "${need[@]}"; do
    case "$pkg" in docker.io|lxcfs) engine+=("$pkg") ;; *) rest+=("$pkg") ;; esac
  done
  [ ${#rest[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${rest[@]}" >/dev/null
  [ ${#engine[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${engine[@]}" >/dev/null
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
# the packages enable their services for the next boot; the lab runs its own engine, so none of them is enabled
for unit in docker.service docker.socket containerd.service lxcfs.service docker-registry.service; do
  rm -f /etc/systemd/system/*.wants/"$unit"
done
if [ "$profile" = all ]; then
  if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  fi
  if [ "$(uname -m)" != aarch64 ] && [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    # the package's postinst registers it when binfmt_misc is mounted; without systemd, do it here
    update-binfmts --enable qemu-aarch64 2>/dev/null || true
    if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
      echo "install-deps: qemu-aarch64 is not registered in binfmt_misc; arm64 images cannot be built" >&2
      exit 1
    fi
  fi
fi
# this package with its test extra, and the lab (lab/: the `specfleet-lab` distribution and command, outside the
# runtime wheel)
python3 -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]" -e ./lab
