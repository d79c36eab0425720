"""The fleet's Hub mirror as files (pure): the units and olah's config rendered from the validated settings, and the
URL the fleet reaches it at. Its layout on the mirror host (everything under mirror_cache_dir, and the units) is
host/layout.py's MirrorLayout. The mirror's status read, warm-up and deploy are in mirror/status.py and mirror/steps.py.

Units: specfleet-hub-mirror.service (olah on 127.0.0.1:mirror_engine_port), specfleet-hub-mirror-proxy.socket
(mirror_bind:mirror_port, IPAddressDeny=any + IPAddressAllow=mirror_allowed_networks) and
specfleet-hub-mirror-proxy.service (systemd-socket-proxyd relaying accepted connections to olah).
"""

from __future__ import annotations

import json
from typing import Any

from ..fleet.settings import Settings
from ..fleet.templating import ENV, systemd_args, systemd_word
from ..host.layout import MIRROR_UNIT, MirrorLayout
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
