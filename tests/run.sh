#!/usr/bin/env bash
# Run every test tier: unit (seconds), stand-ins, and the VM tier (a 3-guest QEMU fleet, ~15-20 min on
# 2 cores). The VM fleet is always torn down, also when tests fail. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
exec python3 -m pytest -p no:cacheprovider -o junit_family=xunit2 tests "$@"
