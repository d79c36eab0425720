#!/bin/sh
# The one status read of a gateway host (gateway.GatewayStatus): everything the gateway deploy decides on, as
# `key<TAB>value` lines, in one remote command. Read-only. From the environment (host/layout.py's GatewayLayout):
# FILES (newline-separated paths whose mode|user|group|sha256 to report), ADMIN (HAProxy's runtime API socket).
echo "haproxy	$(haproxy -v 2>/dev/null | sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p')"
echo "features	$(haproxy -vv 2>/dev/null | sed -n 's/^Feature list : //p')"
echo "active	$(systemctl is-active haproxy 2>/dev/null)"
echo "enabled	$(systemctl is-enabled haproxy 2>/dev/null)"
echo "admin	$([ -S "$ADMIN" ] && echo yes)"
echo "dpkg_busy	$(ps -eo comm= 2>/dev/null | grep -E -x 'apt|apt-get|aptitude|dpkg|unattended-upgr' | sort -u | tr '\n' ' ')"
printf '%s\n' "$FILES" | while IFS= read -r f; do [ -n "$f" ] || continue
  [ -f "$f" ] && echo "file	$(stat -c '%a|%U|%G' "$f")|$(sha256sum "$f" | cut -d' ' -f1)	$f"; done
true
