#!/bin/sh
# drop-caches: the serving unit's ExecStartPre (installed as <data_dir>/bin/drop-caches), so it runs before EVERY start
# of the serving container: a host job's switch, a restart by systemd's restart policy, a boot. On a GB10 the page
# cache shares the one memory pool with the GPU, and TensorRT-LLM sizes its KV cache from what is free at load time;
# NVIDIA's playbook says to flush it before loading (`sync; echo 3 > /proc/sys/vm/drop_caches`). This does that, says
# so in the unit's journal, and records MemAvailable before and after in $1 (JSON) for the readiness gate's result.
# A kernel that refuses the drop is said, never a failed start (the unit runs this with `-`, too).
out=${1:?usage: drop-caches RECORD_FILE}
avail() { awk '/^MemAvailable:/{print $2}' /proc/meminfo; }
before=$(avail)
# bounded: a hung filesystem must not hold every start past the unit's TimeoutStartSec (the drop goes on without it)
timeout 60 sync || echo "drop-caches: sync did not finish within 60 s" >&2
if echo 3 > /proc/sys/vm/drop_caches; then what="dropped the page cache"; else what="could NOT drop the page cache"; fi
after=$(avail)
printf '{"at": %s, "before_kb": %s, "after_kb": %s}\n' "$(date +%s)" "${before:-0}" "${after:-0}" > "$out.tmp" &&
  mv -f "$out.tmp" "$out"
echo "drop-caches: flushed dirty pages and $what before the start: MemAvailable $((${before:-0} / 1024)) MiB ->" \
     "$((${after:-0} / 1024)) MiB"
