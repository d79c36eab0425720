#!/bin/sh
# The one status read of a Hub mirror host (mirror.MirrorStatus): everything the mirror deploy decides on, as
# `key<TAB>value` lines, in one remote command. Read-only. Paths come from the environment (host/layout.py's
# MirrorLayout): C (mirror_cache_dir) VENV MODELS (olah's cached models); and PY (mirror_python), U (olah's user),
# SERVICE SOCKET (unit names), FILES DIRS (newline-separated paths whose sha256 / mode|user|group to report).
echo "python	$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
echo "venv_module	$("$PY" -c 'import ensurepip, venv' 2>/dev/null && echo yes)"
echo "olah	$(sed -n 's/^Version: //p' "$VENV"/lib/python3*/site-packages/olah-*.dist-info/METADATA 2>/dev/null | head -n 1)"
echo "user	$(id -u "$U" 2>/dev/null)"
printf '%s\n' "$FILES" | while IFS= read -r f; do [ -n "$f" ] || continue
  [ -f "$f" ] && echo "sha	$(sha256sum "$f" | cut -d' ' -f1)	$f"; done
printf '%s\n' "$DIRS" | while IFS= read -r f; do [ -n "$f" ] || continue
  [ -d "$f" ] && echo "dir	$(stat -c '%a|%U|%G' "$f")	$f"; done
echo "active	$(systemctl is-active "$SERVICE" 2>/dev/null)	$(systemctl is-active "$SOCKET" 2>/dev/null)"
echo "enabled	$(systemctl is-enabled "$SERVICE" 2>/dev/null)	$(systemctl is-enabled "$SOCKET" 2>/dev/null)"
d="$C"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
for r in "$MODELS"/*/*/resolve/*; do [ -d "$r" ] || continue
  echo "commit	$(du -sb "$r" | cut -f1)	${r#"$MODELS"/}"; done
true
