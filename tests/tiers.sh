#!/usr/bin/env bash
# A test tier's two pytest processes (called by tests/run.sh, after its deps and lint; args: pytest's, --full among
# them for the full tier). The modules that boot QEMU guests of their own (QEMU_MODULES: those marked
# pytest.mark.kernel, whose hosts are QEMU guests under TCG, CPU-bound, and pytest.mark.qemu_guests, a benchmark of
# both drivers) run in a second process beside everything else (the unit tests and the container hosts' modules,
# which leave most of the CPU idle). The second process's
# output goes to a log whose path is printed first and whose content is printed at the end. A SIGTERM or SIGINT is
# passed to both, and this waits until both have torn their hosts down. Exit 0 only when both passed (or one
# selected no test). SPECFLEET_PYTEST: the pytest command (tests/unit/test_tiers.py gives a stand-in to check this
# script).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a PYTEST <<<"${SPECFLEET_PYTEST:-python3 -m pytest}"
PYTEST+=(-p no:cacheprovider -o junit_family=xunit2 --durations=0 --durations-min=10)
mapfile -t QEMU_MODULES < <(grep -lE 'pytest\.mark\.(kernel\(|qemu_guests)' tests/vm/test_*.py)
ignore=()
for m in "${QEMU_MODULES[@]}"; do ignore+=("--ignore=$m"); done
side_log="${SPECFLEET_SIDE_LOG:-$(mktemp -t specfleet-qemu-modules.XXXXXX.log)}"
main=""; side=""
trap 'kill -TERM $main $side 2>/dev/null || true' TERM INT
echo "tier: ${QEMU_MODULES[*]} (QEMU) run beside the rest; their output: $side_log"
"${PYTEST[@]}" --basetemp="$(mktemp -d -t specfleet-qemu-modules.XXXXXX)" "${QEMU_MODULES[@]}" "$@" >"$side_log" 2>&1 &
side=$!
"${PYTEST[@]}" tests benchmarks "${ignore[@]}" "$@" &
main=$!
# wait returns early when a trapped signal arrives: wait again until the process has ended (its guests torn down)
finish() { local rc=0; while :; do wait "$1" && rc=0 || rc=$?; kill -0 "$1" 2>/dev/null || break; done; return "$rc"; }
rc_main=0; rc_side=0
finish "$main" || rc_main=$?
finish "$side" || rc_side=$?
echo "===== tier: the QEMU modules' run (${QEMU_MODULES[*]}), from $side_log ====="
cat "$side_log"
echo "tier: the main run exited $rc_main, the QEMU modules' run $rc_side"
# 5: pytest selected no test (`-k` matching only the other run's): that run has nothing to fail
if [ "$rc_main" = 5 ] && [ "$rc_side" = 5 ]; then exit 5; fi
[ "$rc_main" = 0 ] || [ "$rc_main" = 5 ] || exit "$rc_main"
[ "$rc_side" = 0 ] || [ "$rc_side" = 5 ] || exit "$rc_side"
