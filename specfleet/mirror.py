"""The fleet's Hub mirror: olah on the hosts of the inventory group `hub_mirror` (deploys/hub_mirror.py).

What it renders (systemd units + olah's config, from the validated settings), the one status read of a mirror
host (MirrorStatus), the warm-up program run there as a host job, and `specfleet mirror status`.

Layout on the mirror host (everything under mirror_cache_dir):
    venv/        olah, pinned (mirror_requirement), from pip_index_url
    olah.toml    olah's config (upstream = the mirror host's hub_endpoint)
    repos/       olah's cache: files/models/<org>/<repo>/resolve/<commit>/<file> (written by the service user)
    logs/        olah's logs
Units: specfleet-hub-mirror.service (olah on 127.0.0.1:mirror_engine_port), specfleet-hub-mirror-proxy.socket
(mirror_bind:mirror_port, IPAddressDeny=any + IPAddressAllow=mirror_allowed_networks) and
specfleet-hub-mirror-proxy.service (systemd-socket-proxyd relaying accepted connections to olah).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field

import click
import jinja2
from pyinfra.api import FactBase

from .render import TEMPLATES, systemd_args, systemd_word
from .settings import Settings, mirror_url

NAME = "specfleet-hub-mirror"  # systemd unit names (olah; -proxy.socket / -proxy.service in front of it)
USER = "specfleet-mirror"  # system user olah runs as (owns repos/ and logs/, nothing else)
UNIT_DIR = "/etc/systemd/system"


@dataclass(frozen=True)
class MirrorPaths:
    cache_dir: str

    venv = property(lambda self: f"{self.cache_dir}/venv")
    python = property(lambda self: f"{self.cache_dir}/venv/bin/python")
    config = property(lambda self: f"{self.cache_dir}/olah.toml")
    repos = property(lambda self: f"{self.cache_dir}/repos")
    logs = property(lambda self: f"{self.cache_dir}/logs")
    service = property(lambda self: f"{UNIT_DIR}/{NAME}.service")
    socket = property(lambda self: f"{UNIT_DIR}/{NAME}-proxy.socket")
    proxy = property(lambda self: f"{UNIT_DIR}/{NAME}-proxy.service")


def upstream_parts(endpoint: str) -> tuple[str, str, str]:
    """(scheme, netloc, LFS netloc) of the mirror's upstream Hub (validated: http(s)://host[:port], no path)."""
    scheme, _, netloc = endpoint.partition("://")
    netloc = netloc.rstrip("/")
    lfs = "cdn-lfs.huggingface.co" if netloc == "huggingface.co" else netloc
    return scheme, netloc, lfs


def advertised_url(s: Settings, connection: dict) -> str:
    """Where the fleet reaches this mirror host (what the other hosts' hub_endpoint defaults to)."""
    return mirror_url({"mirror_address": s.mirror_address, "mirror_port": s.mirror_port}, connection, s.host)


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=TEMPLATES, undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              autoescape=False)


def _listen(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def mirror_files(s: Settings, connection: dict) -> dict[str, str]:
    """Host path -> content of every file the mirror deploy writes (no secret in any of them)."""
    p = MirrorPaths(s.mirror_cache_dir)
    scheme, netloc, lfs = upstream_parts(s.hub_endpoint)
    mirror_netloc = advertised_url(s, connection).split("://", 1)[1]
    env = _env()
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


# ---- the one status read of a mirror host ------------------------------------------------------------------
_SCRIPT = r"""
echo "python	$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)"
echo "venv_module	$("$PY" -c 'import ensurepip, venv' 2>/dev/null && echo yes)"
echo "olah	$(sed -n 's/^Version: //p' "$C"/venv/lib/python3*/site-packages/olah-*.dist-info/METADATA 2>/dev/null | head -n 1)"
echo "user	$(id -u "$U" 2>/dev/null)"
printf '%s\n' "$FILES" | while IFS= read -r f; do [ -n "$f" ] || continue
  [ -f "$f" ] && echo "sha	$(sha256sum "$f" | cut -d' ' -f1)	$f"; done
printf '%s\n' "$DIRS" | while IFS= read -r f; do [ -n "$f" ] || continue
  [ -d "$f" ] && echo "dir	$(stat -c '%a|%U|%G' "$f")	$f"; done
echo "active	$(systemctl is-active "$N.service" 2>/dev/null)	$(systemctl is-active "$N-proxy.socket" 2>/dev/null)"
echo "enabled	$(systemctl is-enabled "$N.service" 2>/dev/null)	$(systemctl is-enabled "$N-proxy.socket" 2>/dev/null)"
d="$C"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done
echo "free	$(df -PB1 "$d" | awk 'NR==2{print $4}')"
for r in "$C"/repos/files/models/*/*/resolve/*; do [ -d "$r" ] || continue
  echo "commit	$(du -sb "$r" | cut -f1)	${r#"$C"/repos/files/models/}"; done
true
"""


@dataclass
class MirrorState:
    python: str = ""  # "3.11" (empty: mirror_python missing)
    venv_module: bool = False
    olah: str = ""  # installed olah version
    user: bool = False
    sha: dict[str, str] = field(default_factory=dict)  # path -> sha256 of the managed files present
    dirs: dict[str, str] = field(default_factory=dict)  # path -> mode|user|group
    service: str = ""
    socket: str = ""
    enabled: tuple[str, str] = ("", "")
    free_bytes: int = 0
    commits: dict[str, int] = field(default_factory=dict)  # "<org>/<repo>/resolve/<commit>" -> bytes cached

    @property
    def cached_bytes(self) -> int:
        return sum(self.commits.values())


def parse_mirror_state(lines: list[str]) -> MirrorState:
    st = MirrorState()
    for line in lines:
        key, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if key == "python":
            st.python = rest.strip()
        elif key == "venv_module":
            st.venv_module = rest.strip() == "yes"
        elif key == "olah":
            st.olah = rest.strip()
        elif key == "user":
            st.user = bool(rest.strip())
        elif key == "sha" and len(parts) == 2:
            st.sha[parts[1]] = parts[0]
        elif key == "dir" and len(parts) == 2:
            st.dirs[parts[1]] = parts[0]
        elif key == "active":
            st.service, st.socket = (parts + [""])[:2]
        elif key == "enabled":
            st.enabled = tuple((parts + [""])[:2])
        elif key == "free":
            st.free_bytes = int(rest) if rest.strip().isdigit() else 0
        elif key == "commit" and len(parts) == 2 and parts[0].isdigit():
            st.commits[parts[1]] = int(parts[0])
    return st


class MirrorStatus(FactBase):
    """Everything the mirror deploy decides on, in one remote command."""

    def command(self, cache_dir: str, python: str, files: tuple[str, ...], dirs: tuple[str, ...]) -> str:
        env = {"C": cache_dir, "PY": python, "U": USER, "N": NAME, "FILES": "\n".join(files), "DIRS": "\n".join(dirs)}
        return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + "; " + _SCRIPT

    def process(self, output) -> MirrorState:
        return parse_mirror_state(list(output))


# ---- warming the mirror: one GET of each needed file through it, bodies discarded ------------------------------
# Run on the mirror host with olah's virtualenv Python, as a host job (root); argv: base URL, the token file ("-":
# none), then "repo commit path size" quadruples. Each file is read through the mirror (so olah fetches it upstream
# once and caches it), with the token (gated repos: olah checks it with the upstream Hub, then fetches with it);
# its size is checked; 429/5xx/connection errors are retried with exponential backoff (Retry-After when longer).
WARM = r"""
import http.client, re, sys, time, urllib.error, urllib.parse, urllib.request
base, token_file, items = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3:]
ATTEMPTS = 8
headers = {}
if token_file != "-":
    with open(token_file, encoding="utf-8") as f:
        headers["Authorization"] = "Bearer " + f.read().strip()
todo = [items[i:i + 4] for i in range(0, len(items), 4)]
total = 0
for repo, commit, path, size in todo:
    url = f"{base}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}"
    for attempt in range(1, ATTEMPTS + 1):
        wait = min(2 ** (attempt - 1), 30)
        try:
            n = 0
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as r:
                while True:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    n += len(chunk)
            if n != int(size):
                raise OSError(f"got {n} bytes, expected {size}")
            total += n
            print(f"warm: {repo}@{commit[:12]} {path}: {n} bytes", flush=True)
            break
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403) or (exc.code == 404 and token_file == "-"):
                sys.exit(f"hub mirror {base}: {repo}@{commit[:12]} {path}: HTTP {exc.code} {exc.reason} (a gated repo? the "
                         "mirror host reads it with the fleet's token (HF_TOKEN or hf_token_file), which needs access to it)")
            if exc.code != 429 and exc.code < 500:
                sys.exit(f"hub mirror {base}: {repo}@{commit[:12]} {path}: HTTP {exc.code} {exc.reason}")
            why = f"HTTP {exc.code}"
            retry_after = (exc.headers.get("Retry-After") or "").strip()
            if re.fullmatch(r"[0-9]{1,6}", retry_after):
                wait = max(wait, min(int(retry_after), 300))
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, a body cut short
            why = f"{type(exc).__name__}: {exc}"
        if attempt == ATTEMPTS:
            sys.exit(f"hub mirror {base}: {repo}@{commit[:12]} {path}: failed after {ATTEMPTS} attempts ({why})")
        print(f"warm: {repo}@{commit[:12]} {path}: {why}; retrying in {wait} s (attempt {attempt} of {ATTEMPTS})", flush=True)
        time.sleep(wait)
print(f"warm: {len(todo)} file(s), {total} bytes through {base}", flush=True)
"""


# ---- specfleet mirror status ---------------------------------------------------------------------------------
@click.group("mirror")
def cli() -> None:
    """The fleet's Hub mirror (hosts of the inventory group hub_mirror)."""


@cli.command("status")
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
def status(inventory_file: str) -> None:
    """Each mirror host: service state, cached repos/commits with bytes, free disk of its cache."""
    from pyinfra import host
    from pyinfra.api import deploy

    from .plan import EXIT_INVALID, fleet_plans_or_exit
    from .rollout import run_on

    inventory, plans = fleet_plans_or_exit(inventory_file)
    mirrors = [h for h, plan in plans.items() if plan.is_mirror]
    if not mirrors:
        click.echo("the inventory has no hub_mirror group", err=True)
        sys.exit(EXIT_INVALID)
    found: dict[str, MirrorState] = {}

    @deploy("Read the mirror's status")
    def collect():
        s = plans[host.name].settings
        found[host.name] = host.get_fact(MirrorStatus, cache_dir=s.mirror_cache_dir, python=s.mirror_python,
                                         files=(), dirs=())

    run_on(plans, mirrors, collect)
    for name in mirrors:
        s, st = plans[name].settings, found.get(name)
        url = advertised_url(s, plans[name].connection)
        if st is None:
            click.echo(f"{name}: unreachable ({url})")
            continue
        click.echo(f"{name}: {url} (upstream {s.hub_endpoint}): olah {st.olah or 'not installed'}, service {st.service or '-'}, "
                   f"socket {st.socket or '-'}; cache {s.mirror_cache_dir}: {st.cached_bytes / 1e9:.2f} GB cached, "
                   f"{st.free_bytes / 1e9:.1f} GB free")
        for key, size in sorted(st.commits.items()):
            repo, _, commit = key.partition("/resolve/")
            click.echo(f"  {repo}@{commit[:12]}  {size / 1e9:.3f} GB")
