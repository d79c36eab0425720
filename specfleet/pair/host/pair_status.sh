# The pair part of a Spark's one status read (pair_status.PAIR), as `key<TAB>value` lines. Read-only; a fragment of
# the one remote command (facts.SpecfleetHost). From the environment: LINKS (a pair host's link interfaces,
# newline-separated; empty elsewhere), PINGS (a pair head's `IFNAME ADDRESS` lines: one ping each across the link,
# 1 s at most).
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
