#!/usr/bin/env bash
# The --full tier's two pytest processes (called by tests/run.sh --full, after its deps and lint; args: pytest's).
# The modules whose guests are their own (OWN_FLEETS: tests/vm/conftest.py own_guests/paused_session_fleet, no
# session fleet) run in a second process beside the session fleet's modules: on 2 TCG cores those leave about a
# quarter of the CPU idle (one guest busy while the others wait), which the pair's, the memory module's and the
# arm64 guests then use. Measured side by side: README, "Newcomers". The second process's output goes to a log
# whose path is printed first and whose content is printed at the end. A SIGTERM or SIGINT is passed to both, and
# this waits until both have torn their guests down. Exit 0 only when both passed (or one selected no test).
# SPECFLEET_PYTEST: the pytest command (tests/unit/test_full_tier.py gives a stand-in to check this script).
set -euo pipefail
cd "$(dirname "$0")/.."
read -r -a PYTEST <<<"${SPECFLEET_PYTEST:-python3 -m pytest}"
PYTEST+=(-p no:cacheprovider -o junit_family=xunit2 --durations=0 --durations-min=10)
OWN_FLEETS=(tests/vm/test_pair.py tests/vm/test_pair_link.py tests/vm/test_memory_oom.py tests/vm/test_arm64.py)
ignore=()
for m in "${OWN_FLEETS[@]}"; do ignore+=("--ignore=$m"); done
side_log="${SPECFLEET_FULL_LOG:-$(mktemp -t specfleet-own-fleets.XXXXXX.log)}"
main=""; side=""
trap 'kill -TERM $main $side 2>/dev/null || true' TERM INT
echo "full tier: ${OWN_FLEETS[*]} run beside the session fleet's modules; their output: $side_log"
"${PYTEST[@]}" --basetemp="$(mktemp -d -t specfleet-own-fleets.XXXXXX)" "${OWN_FLEETS[@]}" "$@" >"$side_log" 2>&1 &
side=$!
"${PYTEST[@]}" tests benchmarks "${ignore[@]}" "$@" &
main=$!
# wait returns early when a trapped signal arrives: wait again until the process has ended (its guests torn down)
finish() { local rc=0; while :; do wait "$1" && rc=0 || rc=$?; kill -0 "$1" 2>/dev/null || break; done; return "$rc"; }
rc_main=0; rc_side=0
finish "$main" || rc_main=$?
finish "$side" || rc_side=$?
echo "===== full tier: the own-fleet modules' run (${OWN_FLEETS[*]}), from $side_log ====="
cat "$side_log"
echo "full tier: the session fleet's run exited $rc_main, the own fleets' run $rc_side"
# 5: pytest selected no test (`-k` matching only the other run's): that run has nothing to fail
if [ "$rc_main" = 5 ] && [ "$rc_side" = 5 ]; then exit 5; fi
[ "$rc_main" = 0 ] || [ "$rc_main" = 5 ] || exit "$rc_main"
[ "$rc_side" = 0 ] || [ "$rc_side" = 5 ] || exit "$rc_side"
