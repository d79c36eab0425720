#!/usr/bin/env bash
# Run the tests: unit (seconds), the lab's, stand-ins, and the VM tier (the lab's hosts: containers, and QEMU guests
# for what needs a kernel of its own, in a second process beside the rest: tests/tiers.sh); what CI runs. `--full`
# adds the heaviest scenarios (tests marked `full`). The hosts are always torn down, also when tests fail or the run
# gets SIGTERM. Extra args go to pytest; the slowest tests are listed last.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tests/install-deps.sh
# lint first (pyflakes, import order, line length, bugbear, pyupgrade, simplify, complexity; config in pyproject.toml):
# a finding fails the run
python3 -m ruff check specfleet lab benchmarks tests
# type-check specfleet/ (strict for the pure core and the host programs; config and exceptions in pyproject.toml)
python3 -m mypy
# the user's manual builds as a site; a broken link or anchor fails the run (mkdocs.yml: strict, validation)
site=$(mktemp -d -t specfleet-site.XXXXXX)
python3 -m mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"
exec bash tests/tiers.sh "$@"
