#!/usr/bin/env bash
# Try specfleet on a local 2-guest VM fleet: bring it up, converge EAGLE-3 with pyinfra, print a completion.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tests/install-deps.sh
# the VM lab's command: 2 guests in $SPECFLEET_VM_DIR (default .vm); the first time it builds the guest image
specfleet-lab up --count 2
exec python3 -m tests.vm.try_it "$@"
