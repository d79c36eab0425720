# The image part of a Spark's one status read (mirror/status.py: SPARK), as `key<TAB>value` lines. Read-only; a
# fragment of the one remote command. From the environment: IMAGE_UPSTREAM (the pinned image in its own registry by
# the lock's digest; empty: not pinned) and IMAGE_REGISTRY (the mirror's registry, host:port; empty: image_mirror off).
[ -n "$IMAGE_UPSTREAM" ] && echo "image_upstream	$(docker image inspect --format '{{.Id}}' "$IMAGE_UPSTREAM" 2>/dev/null)"
[ -n "$IMAGE_REGISTRY" ] && echo "image_registries	$(docker info --format '{{json .RegistryConfig.IndexConfigs}}' 2>/dev/null)"
