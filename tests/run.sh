#!/usr/bin/env bash
# Run every test tier: unit (seconds), stand-ins, and the VM tier (a 3-guest QEMU fleet on 2 cores; what CI
# runs). `--full` adds the heaviest VM scenarios (tests marked `full`), the modules with guests of their own in a
# second process beside the session fleet's (tests/full_tier.sh). The VM fleets are always torn down, also when
# tests fail or the run gets SIGTERM. Extra args go to pytest; the slowest tests are listed last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
# lint first (pyflakes, import order, line length 120; config in pyproject.toml): a finding fails the run
python3 -m ruff check specfleet lab benchmarks tests
for arg in "$@"; do
  if [ "$arg" = --full ]; then exec bash tests/full_tier.sh "$@"; fi
done
exec python3 -m pytest -p no:cacheprovider -o junit_family=xunit2 --durations=0 --durations-min=10 tests benchmarks "$@"
