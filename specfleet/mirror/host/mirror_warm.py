"""Warm the Hub mirror: one GET of each needed file through it, bodies discarded.

Run on the mirror host with olah's virtualenv Python, as a host job (root), shipped as `<venv python> -c <this
file's text> BASE TOKEN_FILE REPO COMMIT PATH SIZE ...` (steps/mirror.py): the mirror's base URL, the token file
("-": none; a path, the token stays in its file), then "repo commit path size" quadruples. Each file is read
through the mirror (so olah fetches it upstream once and caches it), with the token (gated repos: olah checks it
with the upstream Hub, then fetches with it); its size is checked; 429/5xx/connection errors are retried with
exponential backoff (Retry-After when longer). A file that cannot be read ends the program with one line.
Stdlib only.
"""

import http.client
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ATTEMPTS = 8  # reads of one file before giving up
CHUNK = 1 << 20  # bytes per read of a body
TIMEOUT = 120  # seconds of silence before a read fails (and is retried)


def say(line):
    print(line, flush=True)


def quadruples(items):
    """(repo, commit, path, size) of each file named on the command line."""
    return [(repo, commit, path, int(size)) for repo, commit, path, size in
            (items[i:i + 4] for i in range(0, len(items), 4))]


def backoff(attempt, retry_after=""):
    """Seconds to wait after failed attempt `attempt` (from 1): 1, 2, 4, ... up to 30; a longer Retry-After (in
    seconds, at most 300 honoured) wins."""
    wait = min(2 ** (attempt - 1), 30)
    retry_after = retry_after.strip()
    if re.fullmatch(r"[0-9]{1,6}", retry_after):
        wait = max(wait, min(int(retry_after), 300))
    return wait


def refusal(code, reason, where, with_token):
    """The one line to stop with for an HTTP error that a retry does not cure; None for 429 and 5xx (retried)."""
    if code in (401, 403) or (code == 404 and not with_token):
        return (f"{where}: HTTP {code} {reason} (a gated repo? the mirror host reads it with the fleet's token "
                "(HF_TOKEN or hf_token_file), which needs access to it)")
    if code != 429 and code < 500:
        return f"{where}: HTTP {code} {reason}"
    return None


def read_through(url, headers):
    """Bytes of the body at url, read and discarded."""
    n = 0
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=TIMEOUT) as r:
        while True:
            chunk = r.read(CHUNK)
            if not chunk:
                return n
            n += len(chunk)


def warm_file(base, headers, repo, commit, path, size, read=read_through, sleep=time.sleep):
    """Read one file through the mirror, retrying what may pass; its size. SystemExit with one line otherwise."""
    where = f"hub mirror {base}: {repo}@{commit[:12]} {path}"
    url = f"{base}/{repo}/resolve/{commit}/{urllib.parse.quote(path)}"
    for attempt in range(1, ATTEMPTS + 1):
        retry_after = ""
        try:
            n = read(url, headers)
            if n != size:
                raise OSError(f"got {n} bytes, expected {size}")
            say(f"warm: {repo}@{commit[:12]} {path}: {n} bytes")
            return n
        except urllib.error.HTTPError as exc:
            line = refusal(exc.code, exc.reason, where, "Authorization" in headers)
            if line:
                sys.exit(line)
            why = f"HTTP {exc.code}"
            retry_after = (exc.headers or {}).get("Retry-After") or ""
        except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out, a body cut short
            why = f"{type(exc).__name__}: {exc}"
        if attempt == ATTEMPTS:
            sys.exit(f"{where}: failed after {ATTEMPTS} attempts ({why})")
        wait = backoff(attempt, retry_after)
        say(f"warm: {repo}@{commit[:12]} {path}: {why}; retrying in {wait} s (attempt {attempt} of {ATTEMPTS})")
        sleep(wait)


def main(argv):
    base, token_file, items = argv[1].rstrip("/"), argv[2], argv[3:]
    headers = {}
    if token_file != "-":
        with open(token_file, encoding="utf-8") as f:
            headers["Authorization"] = "Bearer " + f.read().strip()
    todo = quadruples(items)
    total = sum(warm_file(base, headers, *item) for item in todo)
    say(f"warm: {len(todo)} file(s), {total} bytes through {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
