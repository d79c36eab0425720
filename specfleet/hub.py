"""Controller-side Hub metadata: resolve each model's revision to a commit once, list the files the
server needs (with sizes, for the disk preflight), and check gated repos before any host changes."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .settings import Problem, Settings

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

    @property
    def size(self) -> int:
        return sum(size for _, size in self.files)


def _models_of(s: Settings) -> list[tuple[str, dict, str, str]]:
    out = [("target", s.profile["target"], s.target_revision, "target_revision")]
    if s.profile.get("draft"):
        out.append(("draft", s.profile["draft"], s.draft_revision, "draft_revision"))
    return out


def resolve_pins(fleet: dict[str, Settings]) -> tuple[dict[str, dict[str, ModelPin]], list[Problem]]:
    """Per host: {"target": pin, "draft": pin}. Each (endpoint, repo, revision, token) is asked once."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, RepositoryNotFoundError,
                                        RevisionNotFoundError)
    from huggingface_hub.utils import filter_repo_objects

    cache: dict[tuple, ModelPin | str] = {}
    pins: dict[str, dict[str, ModelPin]] = {}
    problems: list[Problem] = []
    for host, s in fleet.items():
        if s.profile is None:
            continue
        token = s.hf_token.get_secret_value() if s.hf_token else None
        host_pins: dict[str, ModelPin] = {}
        for role, model, revision, key in _models_of(s):
            cache_key = (s.controller_endpoint, model["repo"], revision, token, tuple(model["ignore_patterns"]))
            if cache_key not in cache:
                api = HfApi(endpoint=s.controller_endpoint, token=token or False)
                repo = model["repo"]
                try:
                    api.auth_check(repo, token=token or False)
                    info = api.model_info(repo, revision=revision, files_metadata=True)
                    siblings = [(f.rfilename, int(f.size or 0)) for f in (info.siblings or [])]
                    keep = set(filter_repo_objects([name for name, _ in siblings],
                                                   ignore_patterns=model["ignore_patterns"] or None))
                    cache[cache_key] = ModelPin(
                        role=role, repo=repo, revision=revision, commit=info.sha,
                        files=tuple(sorted((n, sz) for n, sz in siblings if n in keep)),
                        ignore_patterns=tuple(model["ignore_patterns"]),
                        repo_bytes=sum(sz for _, sz in siblings))
                except GatedRepoError:
                    cache[cache_key] = ("hf_token", f"{repo} is gated and this token has no access; request access at "
                                        f"{s.hub_endpoint}/{repo} (or set hf_token_file to a token that has it)")
                except RevisionNotFoundError:
                    cache[cache_key] = (key, f"revision '{revision}' not found in {repo}")
                except RepositoryNotFoundError:
                    cache[cache_key] = ("hf_token" if token is None else "profile",
                                        f"{repo} not found on {s.controller_endpoint} (private or gated repos need a token)")
                except HfHubHTTPError as exc:
                    cache[cache_key] = ("controller_hub_endpoint", f"Hub error for {repo}: {str(exc).splitlines()[0]}")
                except Exception as exc:  # network errors: unreachable endpoint, DNS, TLS
                    cache[cache_key] = ("controller_hub_endpoint", f"cannot reach {s.controller_endpoint} for {repo}: "
                                        f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            found = cache[cache_key]
            if isinstance(found, ModelPin):
                host_pins[role] = found
            else:
                problems.append(Problem(host, found[0], found[1]))
        pins[host] = host_pins
    return pins, problems
