#!/usr/bin/env bash
# Everything the tests and the local try-it fleet need, on a fresh Debian/Ubuntu machine (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then echo "install-deps: run as root (apt-get, qemu, mmdebstrap)" >&2; exit 1; fi
need=()
for pkg in qemu-system-x86 qemu-utils mmdebstrap e2fsprogs openssh-client curl ca-certificates; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
