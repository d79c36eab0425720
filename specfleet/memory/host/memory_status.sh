# The memory part of a Spark's one status read (memory_status.MEMORY), as `key<TAB>value` lines. Read-only; a fragment
# of the one remote command (facts.SpecfleetHost). From the environment: DOCKERD_PID (the command printing dockerd's
# PID: layout.main_pid), EARLYOOM_BIN EARLYOOM_UNIT.
# the running dockerd's OOM score: docker.service's main process (none: docker runs otherwise, e.g. as a snap)
echo "dockerd_oom	$(p=$($DOCKERD_PID 2>/dev/null) && [ "${p:-0}" -gt 0 ] &&
  cat "/proc/$p/oom_score_adj" 2>/dev/null)"
# the capability bounding set (hex): without CAP_SYS_RESOURCE nothing here can lower an OOM score (a container host)
echo "cap_bnd	$(awk '/^CapBnd:/{print $2}' /proc/self/status 2>/dev/null)"
# earlyoom (a serving Spark's, steps/oom.py): its binary where installed, its unit's active and unit-file states
echo "earlyoom	$([ -x "$EARLYOOM_BIN" ] && echo "$EARLYOOM_BIN")	$(systemctl show -p ActiveState -p UnitFileState --value "$EARLYOOM_UNIT" 2>/dev/null | tr '\n' '\t')"
echo "mem	$(awk '/^MemTotal:/{t=$2} /^MemAvailable:/{a=$2} END{print t "\t" a}' /proc/meminfo 2>/dev/null)"  # kB
