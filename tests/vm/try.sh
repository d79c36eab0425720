#!/usr/bin/env bash
# Try specfleet on a local 2-host fleet: bring it up, converge EAGLE-3 with pyinfra, print a completion. The hosts are
# containers (seconds to start); `--qemu`: QEMU guests instead (a kernel of their own; minutes under TCG).
set -euo pipefail
cd "$(dirname "$0")/../.."
driver=container
if [ "${1:-}" = --qemu ]; then driver=qemu; shift; fi
start=$(date +%s)
bash tests/install-deps.sh try $([ "$driver" = qemu ] && echo --qemu)
echo "==> install-deps: $(( $(date +%s) - start )) s"
# the lab's command: 2 hosts in $SPECFLEET_VM_DIR (default .vm); the first time it builds the host image
specfleet-lab up --count 2 --driver "$driver"
exec python3 -m tests.vm.try_it "$@"
