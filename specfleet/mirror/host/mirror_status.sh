#!/bin/sh
# The one status read of a Hub mirror host (mirror.MirrorStatus): everything the mirror deploy decides on, as
# `key<TAB>value` lines, in one remote command. Read-only. Paths come from the environment (host/layout.py's
# MirrorLayout): C (mirror_cache_dir) VENV MODELS (olah's cached models); and PY (mirror_python), U (olah's user),
# SERVICE SOCKET (unit names), FILES DIRS (newline-separated paths whose sha256 / mode|user|group to report); and for
# the image registry: RSERVICE RSOCKET (its units), RPKG (the package's own unit), RUSER (its user), STORE (its store).
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
pkg() { dpkg-query -W -f '${Status}|${Version}' "$1" 2>/dev/null | sed -n 's/^install ok installed|//p'; }
echo "registry_pkgs	$(pkg docker-registry)	$(pkg skopeo)"
echo "registry_user	$(id -u "$RUSER" 2>/dev/null)"
echo "registry_active	$(systemctl is-active "$RSERVICE" 2>/dev/null)	$(systemctl is-active "$RSOCKET" 2>/dev/null)"
echo "registry_enabled	$(systemctl is-enabled "$RSERVICE" 2>/dev/null)	$(systemctl is-enabled "$RSOCKET" 2>/dev/null)"
echo "registry_package_unit	$(systemctl is-enabled "$RPKG" 2>/dev/null)	$(systemctl is-active "$RPKG" 2>/dev/null)"
[ -d "$STORE" ] && echo "store	$(du -sb "$STORE" | cut -f1)"
r="$STORE/docker/registry/v2/repositories"
[ -d "$r" ] && find "$r" -path '*/_manifests/tags/*/current/link' 2>/dev/null | while IFS= read -r l; do
  t=${l%/current/link}; repo=${t%/_manifests/tags/*}; echo "stored	${repo#"$r"/}	${t##*/}	$(cat "$l")"; done
d="$C"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
for r in "$MODELS"/*/*/resolve/*; do [ -d "$r" ] || continue
  echo "commit	$(du -sb "$r" | cut -f1)	${r#"$MODELS"/}"; done
true
