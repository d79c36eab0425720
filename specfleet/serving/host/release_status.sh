# The release part of a Spark's one status read (release_status.RELEASE): what the host serves, as `key<TAB>value`
# lines. Read-only; a fragment of the one remote command (facts.SpecfleetHost). From the environment (paths from
# host/layout.py): SVC PORT IMAGE CFG (the plan's serving unit, its port, the image, the config's verdict key),
# IMAGE_PINS (the digests the lock records for the image, space-separated; empty: not pinned), UNIT VALIDATED VENV,
# RELEASE_PATHS (JSON, for RELEASE_STATE: the text of host/release_state.py).
# The unit read is the one that serves: the current release's (its record names it; a release of another engine runs
# as another unit until a switch stops it), else the plan's.
serving=$(sed -n 's/^ *"service": "\([A-Za-z0-9_.-]*\)",\{0,1\}$/\1/p' "$DATA/current/release.json" 2>/dev/null | head -n 1)
serving=${serving:-$SVC}
echo "serving_unit	$serving"
echo "listen	$(ss -Hltn "sport = :$PORT" 2>/dev/null | wc -l)"
echo "active	$(systemctl is-active "$serving" 2>/dev/null)"
echo "enabled	$(systemctl is-enabled "$serving" 2>/dev/null)"
echo "unit_sha256	$(sha256sum "$UNIT" 2>/dev/null | cut -d' ' -f1)"
echo "container	$(docker inspect --format '{{.State.Running}}' "$serving" 2>/dev/null)"
# the image's id and the manifests it came by (RepoDigests), then the lock's digests: the controller applies THE rule
# (host/docker_images.pinned) to them, since a tag alone proves nothing
echo "image	$(docker image inspect --format '{{.Id}} {{json .RepoDigests}}' "$IMAGE" 2>/dev/null)	$IMAGE_PINS"
# The release state: current, previous, kept releases, the current record, gate, lock, active job (one JSON line,
# from THE reader, host/release_state.py, shipped in $RELEASE_STATE; -I -S: stdlib only, quicker to start).
command -v python3 >/dev/null 2>&1 && echo "release_state	$(python3 -I -S -c "$RELEASE_STATE" "$RELEASE_PATHS" 2>&1 | tail -n 1)"
echo "validated	$(ls "$VALIDATED" 2>/dev/null | grep -e "^$CFG-" | tr '\n' ' ')"
echo "hub_client	$(sed -n 's/^Version: //p' "$VENV"/lib/python3*/site-packages/huggingface_hub-*.dist-info/METADATA 2>/dev/null | head -n 1)"
