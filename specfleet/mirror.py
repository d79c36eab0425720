"""The fleet's Hub mirror (olah on the hosts of the inventory group `hub_mirror`, deploys/hub_mirror.py): the one
status read of a mirror host (MirrorStatus) and the warm-up program run there as a host job. What it renders and
its layout: mirror_files.py; its steps: steps/mirror.py; `specfleet mirror status` reads it with status.read_mirrors.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from pyinfra.api import FactBase

from .mirror_files import NAME, USER

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
