"""The fleet's Hub mirror as files (pure): the units and olah's config rendered from the validated settings, and the
URL the fleet reaches it at. Its layout on the mirror host (everything under mirror_cache_dir, and the units) is
host/layout.py's MirrorLayout. The mirror's status read is mirror/status.py; its steps: mirror/steps/hub.py (olah, the
warm-up) and mirror/steps/registry.py (the image registry).

Hub mirror units: specfleet-hub-mirror.service (olah on 127.0.0.1:mirror_engine_port), specfleet-hub-mirror-proxy.socket
(mirror_bind:mirror_port, IPAddressDeny=any + IPAddressAllow=mirror_allowed_networks) and
specfleet-hub-mirror-proxy.service (systemd-socket-proxyd relaying accepted connections to olah).

With image_mirror, the image registry the same way: specfleet-image-registry.service (the distribution's registry,
read-only, on 127.0.0.1:image_registry_engine_port), -proxy.socket (the mirror's fleet address:image_registry_port,
admitting the Sparks' addresses only) and -proxy.service; reader.yml is its config, writer.yml the fetch job's.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ..fleet.settings import Settings
from ..fleet.templating import ENV, systemd_args, systemd_word
from ..host.layout import MIRROR_UNIT, REGISTRY_BIN, REGISTRY_UNIT, REGISTRY_USER, MirrorLayout
from .rules import mirror_url

NAME = MIRROR_UNIT  # systemd unit names (olah; -proxy.socket / -proxy.service in front of it)
USER = "specfleet-mirror"  # system user olah runs as (owns repos/ and logs/, nothing else)


def upstream_parts(endpoint: str) -> tuple[str, str, str]:
    """(scheme, netloc, LFS netloc) of the mirror's upstream Hub (validated: http(s)://host[:port], no path)."""
    scheme, _, netloc = endpoint.partition("://")
    netloc = netloc.rstrip("/")
    lfs = "cdn-lfs.huggingface.co" if netloc == "huggingface.co" else netloc
    return scheme, netloc, lfs


def advertised_url(s: Settings, connection: dict[str, Any]) -> str:
    """Where the fleet reaches this mirror host (what the other hosts' hub_endpoint defaults to)."""
    return mirror_url({"mirror_address": s.mirror_address, "mirror_port": s.mirror_port}, connection, s.host)


def _listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def mirror_files(s: Settings, connection: dict[str, Any]) -> dict[str, str]:
    """Host path -> content of every file the mirror deploy writes (no secret in any of them)."""
    p = MirrorLayout(s.mirror_cache_dir)
    scheme, netloc, lfs = upstream_parts(s.hub_endpoint)
    mirror_netloc = advertised_url(s, connection).split("://", 1)[1]
    env = ENV  # one environment per process: each template compiled once
    q = json.dumps  # TOML basic strings: the validated values need no escapes beyond JSON's
    config = env.get_template("olah.toml.j2").render(
        host=q("127.0.0.1"), port=s.mirror_engine_port, hf_scheme=q(scheme), hf_netloc=q(netloc),
        hf_lfs_netloc=q(lfs), mirror_netloc=q(mirror_netloc), repos_path=q(p.repos))
    service = env.get_template("hub-mirror.service.j2").render(
        name=NAME, upstream=s.hub_endpoint, user=USER, cache_dir=systemd_word(p.cache_dir),
        exec_start=systemd_args([p.python, "-m", "olah.server", "--config", p.config, "--log-path", p.logs]),
        writable=systemd_args([p.repos, p.logs]))
    socket = env.get_template("hub-mirror-proxy.socket.j2").render(
        port=s.mirror_port, listen=_listen(s.mirror_bind, s.mirror_port),
        allowed_networks=" ".join(s.mirror_allowed_networks))
    proxy = env.get_template("hub-mirror-proxy.service.j2").render(name=NAME, engine_port=s.mirror_engine_port)
    return {p.config: config, p.service: service, p.socket: socket, p.proxy: proxy}


def ngc_auth_text(s: Settings, redact: bool = True) -> str | None:
    """The mirror's NGC login as a containers-auth.json (what skopeo's --src-authfile reads: user `$oauthtoken`,
    password the key), for ngc_registry only; None without a key. Root-only on the host (secrets_dir)."""
    if s.ngc_api_key is None:
        return None
    key = "<redacted: the NGC API key from ngc_api_key_file>" if redact else s.ngc_api_key.get_secret_value()
    auth = base64.b64encode(f"$oauthtoken:{key}".encode()).decode()
    return json.dumps({"auths": {s.ngc_registry: {"auth": auth}}}, indent=2) + "\n"


def registry_files(s: Settings) -> dict[str, str]:
    """Host path -> content of every file of the image registry (image_mirror on a hub_mirror host; none otherwise).
    `s.image_registry` (address:port) and `s.image_clients` come from the fleet (mirror.rules.image_registry_vars)."""
    if not s.image_mirror or s.image_registry is None:
        return {}
    p = MirrorLayout(s.mirror_cache_dir)
    q = json.dumps  # YAML double-quoted scalars: the validated values need no escapes beyond JSON's

    def config(role: str, addr: str, writer: bool) -> str:
        return ENV.get_template("image-registry.yml.j2").render(
            role=q(role), store=q(s.image_store_dir), addr=q(addr), writer=str(writer).lower(),
            reader=str(not writer).lower())

    address, _, port = s.image_registry.rpartition(":")
    return {
        p.reader_config: config("specfleet-image-registry", f"127.0.0.1:{s.image_registry_engine_port}", False),
        p.writer_config: config("specfleet-image-fetch", "127.0.0.1:0", True),
        p.registry_service: ENV.get_template("image-registry.service.j2").render(
            name=REGISTRY_UNIT, user=REGISTRY_USER, store=systemd_word(s.image_store_dir),
            exec_start=systemd_args([REGISTRY_BIN, "serve", p.reader_config])),
        p.registry_socket: ENV.get_template("image-registry-proxy.socket.j2").render(
            listen=_listen(address, int(port)), allowed=" ".join(s.image_clients)),
        p.registry_proxy: ENV.get_template("image-registry-proxy.service.j2").render(
            name=REGISTRY_UNIT, engine_port=s.image_registry_engine_port),
    }
