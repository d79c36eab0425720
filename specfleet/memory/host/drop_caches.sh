#!/bin/sh
# drop-caches: the serving unit's first ExecStartPre (installed as <data_dir>/bin/drop-caches), so it runs before EVERY
# start of the serving container: a host job's switch, a restart by systemd's restart policy, a boot.
#
# 1. The container's memory cap (with RESERVE_KB and CAP_FILE): MemTotal less the reserve, written to CAP_FILE as
#    NAME=<kB>k, which the unit reads (EnvironmentFile=, read anew before each of its commands) and passes to
#    `docker run --memory=`. The container's cgroup then holds its use to the cap, and when the server outgrows it the
#    kernel kills it inside that cgroup, before the rest of the box runs short (README, "Unified memory"). A cap that
#    cannot be computed or written fails the start: the container never runs uncapped by accident.
#    With UTIL_NAME, the same share as a fraction of MemTotal (4 decimals, rounded down) is written as UTIL_NAME=<f>:
#    what a vLLM release rendered before vllm_gpu_memory_utilization was passed (it may still be rolled back to).
# 2. The clean pool: on a GB10 the page cache shares the one memory pool with the GPU, and TensorRT-LLM sizes its KV
#    cache from what is free at load time; NVIDIA's playbook says to flush it before loading (`sync; echo 3 >
#    /proc/sys/vm/drop_caches`). This does that, says so in the unit's journal, and records MemAvailable before and
#    after in RECORD_FILE (JSON) for the readiness gate's result. A kernel that refuses the drop is said, never a
#    failed start.
#
# Usage: drop-caches RECORD_FILE [RESERVE_KB CAP_FILE NAME [UTIL_NAME]]  (a release rendered before the cap passes the
# first only)
out=${1:?usage: drop-caches RECORD_FILE [RESERVE_KB CAP_FILE NAME [UTIL_NAME]]}
meminfo() { awk -v k="$1:" '$1 == k {print $2}' /proc/meminfo; }
if [ $# -ge 4 ]; then
  reserve=$2 cap_file=$3 name=$4
  total=$(meminfo MemTotal)
  for n in "$total" "$reserve"; do  # each a plain decimal (an empty one would count as 0 in $((...)))
    case "$n" in ""|*[!0-9]*|0?*)
      echo "drop-caches: no container cap: MemTotal '$total' kB or the reserve '$reserve' kB is not a number" >&2
      exit 1;;
    esac
  done
  cap=$((total - reserve))
  if [ "$cap" -lt 65536 ]; then
    echo "drop-caches: no container cap: MemTotal $total kB less the reserve $reserve kB leaves under 64 MiB" >&2
    exit 1
  fi
  {
    printf '%s=%sk\n' "$name" "$cap"
    [ -z "$5" ] || awk -v n="$5" -v c="$cap" -v t="$total" 'BEGIN { printf "%s=%.4f\n", n, int(c * 10000 / t) / 10000 }'
  } > "$cap_file.tmp" && mv -f "$cap_file.tmp" "$cap_file" || exit 1
  echo "drop-caches: the container's memory cap: $((cap / 1024)) MiB (MemTotal $((total / 1024)) MiB less the" \
       "reserve $((reserve / 1024)) MiB)"
fi
before=$(meminfo MemAvailable)
# bounded: a hung filesystem must not hold every start past the unit's TimeoutStartSec (the drop goes on without it)
timeout 60 sync || echo "drop-caches: sync did not finish within 60 s" >&2
if echo 3 > /proc/sys/vm/drop_caches; then what="dropped the page cache"; else what="could NOT drop the page cache"; fi
after=$(meminfo MemAvailable)
printf '{"at": %s, "before_kb": %s, "after_kb": %s}\n' "$(date +%s)" "${before:-0}" "${after:-0}" > "$out.tmp" &&
  mv -f "$out.tmp" "$out"
echo "drop-caches: flushed dirty pages and $what before the start: MemAvailable $((${before:-0} / 1024)) MiB ->" \
     "$((${after:-0} / 1024)) MiB"
exit 0
