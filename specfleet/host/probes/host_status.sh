#!/bin/sh
# The one status read of a specfleet host (facts.SpecfleetHost): everything the converge decides on, as
# `key<TAB>value` lines, in one remote command. Read-only. Paths come from the environment (host/layout.py):
# DATA UNIT VALIDATED VENV, EARLYOOM_BIN EARLYOOM_UNIT, DOCKERD_PID (the command printing dockerd's PID: layout.main_pid), RELEASE_PATHS (JSON, for RELEASE_STATE: the text of host/release_state.py), FILE_STATUS
# (the text of host/probes/file_status.py), and
# SVC PORT IMAGE CFG SIZES FILES USERS (the service, its port, the image, the config's verdict key, and newline-
# separated lists of paths whose size / state to report and users whose groups to report), LINKS (a pair host's
# link interfaces, newline-separated; empty elsewhere), KEYS (public key files whose first line to report, read by
# file_status.py), STATS (paths only stat'ed, never opened: a private key), PINGS (a pair head's `IFNAME ADDRESS` lines: one ping each across the link, 1 s at most).
echo "arch	$(uname -m)"
( . /etc/os-release 2>/dev/null; echo "os	${PRETTY_NAME:-unknown}" )
droot=
if out=$(docker info --format '{{json .Runtimes}}{{"\n"}}{{.DefaultRuntime}}{{"\n"}}{{.DockerRootDir}}{{"\n"}}{{json .SecurityOptions}}' 2>&1); then
  echo "docker	ok"; echo "runtimes	$(printf '%s\n' "$out" | sed -n 1p)"
  echo "default_runtime	$(printf '%s\n' "$out" | sed -n 2p)"; droot=$(printf '%s\n' "$out" | sed -n 3p)
  echo "docker_security	$(printf '%s\n' "$out" | sed -n 4p)"
else echo "docker	$(printf '%s' "$out" | tail -n 1)"; fi
echo "gpu_hook	$(command -v nvidia-container-runtime-hook 2>/dev/null)"
echo "apparmor	$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)	$(grep -c '^docker-default ' /sys/kernel/security/apparmor/profiles 2>/dev/null)	$(command -v apparmor_parser 2>/dev/null)"
echo "dpkg_busy	$(ps -eo comm= 2>/dev/null | grep -E -x 'apt|apt-get|aptitude|dpkg|unattended-upgr' | sort -u | tr '\n' ' ')"
echo "listen	$(ss -Hltn "sport = :$PORT" 2>/dev/null | wc -l)"
echo "active	$(systemctl is-active "$SVC" 2>/dev/null)"
echo "enabled	$(systemctl is-enabled "$SVC" 2>/dev/null)"
echo "unit_sha256	$(sha256sum "$UNIT" 2>/dev/null | cut -d' ' -f1)"
echo "container	$(docker inspect --format '{{.State.Running}}' "$SVC" 2>/dev/null)"
d="$DATA"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
if [ -n "$droot" ]; then set -- $(df -PB1 "$d" "$droot" 2>/dev/null | awk 'NR>1{print $1, $4}')
  [ "$#" -eq 4 ] && echo "docker_root	$4	$([ "$1" = "$3" ] && echo same || echo other)	$droot"; fi
# the running dockerd's OOM score: docker.service's main process (none: docker runs otherwise, e.g. as a snap)
echo "dockerd_oom	$(p=$($DOCKERD_PID 2>/dev/null) && [ "${p:-0}" -gt 0 ] &&
  cat "/proc/$p/oom_score_adj" 2>/dev/null)"
# the capability bounding set (hex): without CAP_SYS_RESOURCE nothing here can lower an OOM score (a container host)
echo "cap_bnd	$(awk '/^CapBnd:/{print $2}' /proc/self/status 2>/dev/null)"
# earlyoom (a serving Spark's, steps/oom.py): its binary where installed, its unit's active and unit-file states
echo "earlyoom	$([ -x "$EARLYOOM_BIN" ] && echo "$EARLYOOM_BIN")	$(systemctl show -p ActiveState -p UnitFileState --value "$EARLYOOM_UNIT" 2>/dev/null | tr '\n' '\t')"
echo "mem	$(awk '/^MemTotal:/{t=$2} /^MemAvailable:/{a=$2} END{print t "\t" a}' /proc/meminfo 2>/dev/null)"  # kB
echo "image	$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null)"
# Sizes, file states and groups: one python3 (host/probes/file_status.py, shipped in $FILE_STATUS), not a few
# programs per path. -I -S: stdlib only, quicker to start.
command -v python3 >/dev/null 2>&1 && python3 -I -S -c "$FILE_STATUS"
# The release state: current, previous, kept releases, the current record, gate, lock, active job (one JSON line,
# from THE reader, host/release_state.py, shipped in $RELEASE_STATE; -I -S: stdlib only, quicker to start).
command -v python3 >/dev/null 2>&1 && echo "release_state	$(python3 -I -S -c "$RELEASE_STATE" "$RELEASE_PATHS" 2>&1 | tail -n 1)"
echo "validated	$(ls "$VALIDATED" 2>/dev/null | grep -e "^$CFG-" | tr '\n' ' ')"
# A pair host: its interfaces, IPv4 addresses, and each link interface's state and speed (Mb/s; none on virtio).
if [ -n "$LINKS" ]; then
  echo "ifaces	$(ls /sys/class/net 2>/dev/null | tr '\n' ' ')"
  ip -o -4 addr show 2>/dev/null | awk '{print "addr\t" $2 "\t" $4}'
  printf '%s\n' "$LINKS" | while IFS= read -r i; do
    echo "link	$i	$(cat "/sys/class/net/$i/operstate" 2>/dev/null || echo missing)	$(cat "/sys/class/net/$i/speed" 2>/dev/null)"
  done
fi
if [ -n "$PINGS" ]; then
  printf '%s\n' "$PINGS" | while read -r i a; do
    if ! command -v ping >/dev/null 2>&1; then r=no-ping
    elif ping -n -q -c 1 -W 1 -I "$i" "$a" >/dev/null 2>&1; then r=ok; else r=fail; fi
    echo "ping	$i	$a	$r"
  done
fi
echo "hub_client	$(sed -n 's/^Version: //p' "$VENV"/lib/python3*/site-packages/huggingface_hub-*.dist-info/METADATA 2>/dev/null | head -n 1)"
true
