"""Controller-side Hub metadata: resolve each model's revision to a commit once, list the files the
server needs (with sizes, for the disk preflight), and check gated repos before any host changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from ..fleet.problems import Problem
from ..fleet.settings import Settings

os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@dataclass(frozen=True)
class ModelPin:
    role: str  # "target" or "draft"
    repo: str
    revision: str  # what the user asked for
    commit: str  # what every host gets
    files: tuple[tuple[str, int], ...]  # (path, size) of the files the server needs, at that commit
    ignore_patterns: tuple[str, ...]
    repo_bytes: int  # all files of the repo at that commit (for the "bytes fetched vs repo" figure)
    blobs: tuple[str, ...] = ()  # blob hash of each of `files`, same order: LFS sha256, else the git blob id

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def models_of(s: Settings) -> list[tuple[str, dict, str, str]]:
    """(role, model, revision, its var) of what the host serves; none on a host built without a profile."""
    if s.profile is None:
        return []
    out = [("target", s.profile["target"], s.target_revision, "target_revision")]
    if s.profile.get("draft"):
        out.append(("draft", s.profile["draft"], s.draft_revision, "draft_revision"))
    return out


def resolve_pins(fleet: dict[str, Settings]) -> tuple[dict[str, dict[str, ModelPin]], list[Problem]]:
    """Per host: {"target": pin, "draft": pin}, live from the Hub (`specfleet check --hub`; converges read
    pins from the lock file instead). Each (endpoint, repo, revision, token) is asked once."""
    requests: dict[tuple, dict] = {}
    tokens: list[str] = []
    wanted: dict[str, list[tuple[str, str, tuple]]] = {}
    for host, s in fleet.items():
        if s.profile is None:
            continue
        token = s.hf_token.get_secret_value() if s.hf_token else None
        if token is not None and token not in tokens:
            tokens.append(token)
        for role, model, revision, key in models_of(s):
            rkey = (s.controller_endpoint, model["repo"], revision, tokens.index(token) if token else -1,
                    tuple(model["ignore_patterns"]))
            requests[rkey] = {"endpoint": rkey[0], "repo": rkey[1], "revision": rkey[2], "token": rkey[3],
                              "ignore": list(rkey[4]), "page": f"{s.hub_endpoint}/{model['repo']}", "key": key}
            wanted.setdefault(host, []).append((role, key, rkey))
    if not requests:
        return {h: {} for h in fleet}, []
    answers_list = lookup(list(requests.values()), tokens)
    if isinstance(answers_list, str):
        return {}, [Problem(h, "controller_hub_endpoint", f"Hub metadata lookup failed: {answers_list}")
                    for h in wanted]
    answers = dict(zip(requests, answers_list, strict=True))
    pins: dict[str, dict[str, ModelPin]] = {h: {} for h in fleet}
    problems: list[Problem] = []
    for host, items in wanted.items():
        for role, _key, rkey in items:
            answer = answers[rkey]
            if "error" in answer:
                problems.append(Problem(host, answer["key"], answer["error"]))
            else:
                pins[host][role] = pin_of(role, rkey[1], rkey[2], answer, rkey[4])
    return pins, problems


def pin_of(role: str, repo: str, revision: str, answer: dict, ignore_patterns: tuple[str, ...]) -> ModelPin:
    """A ModelPin from a lookup answer (or a lock entry of the same shape: commit, files [name, size, blob])."""
    return ModelPin(role=role, repo=repo, revision=revision, commit=answer["commit"],
                    files=tuple((f[0], int(f[1])) for f in answer["files"]), ignore_patterns=tuple(ignore_patterns),
                    repo_bytes=int(answer["repo_bytes"]),
                    blobs=tuple(f[2] if len(f) > 2 else "" for f in answer["files"]))


def lookup(requests: list[dict], tokens: list[str]) -> list[dict] | str:
    """Answer Hub metadata requests ({endpoint, repo, revision, token (index into tokens or -1), ignore, page,
    key}) in a child process; one answer per request ({commit, files [[name, size, blob]], repo_bytes} or
    {key, error}), or one line saying why the lookup itself failed.

    The Hub calls run in a child Python process: pyinfra's CLI monkey-patches the controller process
    with gevent, under which huggingface_hub's HTTP stack cannot load. Tokens reach the child through
    its environment, never its command line."""
    env = {**os.environ, "SPECFLEET_HUB_TOKENS": json.dumps(tokens)}
    proc = subprocess.run([sys.executable, "-m", "specfleet.pins.models"], input=json.dumps(requests),
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(proc.stdout)


def _lookup(req: dict, tokens: list[str]) -> dict:
    """One model at one revision: commit, needed files with sizes; or {"key", "error"} (runs in the child)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    from huggingface_hub.utils import filter_repo_objects

    token = tokens[req["token"]] if req["token"] >= 0 else None
    repo, revision, endpoint = req["repo"], req["revision"], req["endpoint"]
    api = HfApi(endpoint=endpoint, token=token or False)
    try:
        api.auth_check(repo, token=token or False)
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except GatedRepoError:
        if not token:
            return {"key": "hf_token", "error": f"{repo} is gated and no token was given (export HF_TOKEN or set "
                                                f"hf_token_file, with access granted at {req['page']})"}
        return {"key": "hf_token", "error": f"{repo} is gated and this token has no access; request access at "
                                            f"{req['page']} (or set hf_token_file)"}
    except RevisionNotFoundError:
        return {"key": req["key"], "error": f"revision '{revision}' not found in {repo}"}
    except RepositoryNotFoundError:
        return {"key": "hf_token" if token is None else "profile",
                "error": f"{repo} not found on {endpoint} (private or gated repos need a token)"}
    except HfHubHTTPError as exc:
        return {"key": "controller_hub_endpoint", "error": f"Hub error for {repo}: {str(exc).splitlines()[0]}"}
    except Exception as exc:  # network errors: unreachable endpoint, DNS, TLS
        first = str(exc).splitlines()[0] if str(exc) else ""
        return {"key": "controller_hub_endpoint",
                "error": f"cannot reach {endpoint} for {repo}: {type(exc).__name__}: {first}"}
    siblings = [(f.rfilename, int(f.size or 0), (f.lfs.sha256 if f.lfs else f.blob_id) or "")
                for f in (info.siblings or [])]
    for name, _, _ in siblings:  # names become host paths and lines of the status fact
        if (not name or name.startswith("/") or ".." in name.split("/")
                or any(ord(c) < 32 or ord(c) == 127 for c in name)):
            return {"key": req["key"],
                    "error": f"{repo}@{revision} lists the file {name!r}, which is not a safe relative "
                             "path (no control characters, no leading /, no .. segment)"}
    keep = set(filter_repo_objects([n for n, _, _ in siblings], ignore_patterns=req["ignore"] or None))
    return {"commit": info.sha, "files": sorted([n, sz, blob] for n, sz, blob in siblings if n in keep),
            "repo_bytes": sum(sz for _, sz, _ in siblings)}


def _main() -> None:
    tokens = json.loads(os.environ.get("SPECFLEET_HUB_TOKENS", "[]"))
    requests = json.loads(sys.stdin.read())
    json.dump([_lookup(req, tokens) for req in requests], sys.stdout)


if __name__ == "__main__":
    _main()
