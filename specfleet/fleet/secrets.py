"""Secrets read on the controller (pure, stdlib): the Hugging Face token and the NGC API key. Each is read from a file
the user names (or, for the token, $HF_TOKEN), once per host's settings, into a SecretStr; what reaches a host goes
over stdin into a root-only file (fleet/steps/jobs.write_root_file), never a command line, a log or a temp file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import grammars
from .problems import Problem


def read_secret_file(path: str) -> tuple[str | None, str | None]:
    """(secret, problem) of a controller file holding one secret (surrounding whitespace stripped)."""
    try:
        secret = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    except UnicodeDecodeError:
        return None, f"{path} is not UTF-8 text"
    return (secret or None), (None if secret else f"{path} is empty")


def read_token(token_file: str | None) -> tuple[str | None, str | None]:
    """(token, problem) read on the controller: hf_token_file if set, else $HF_TOKEN."""
    if token_file:
        return read_secret_file(token_file)
    token = os.environ.get("HF_TOKEN", "").strip()
    return (token or None), None


def hf_token(host: str, values: dict[str, Any], serving: bool, problems: list[Problem]) -> str | None:
    """The Hugging Face token, read where a host `serving` (a profile run, or a mirror in a deploy run) or
    hf_token_required asks for it; a problem where it is unreadable, or missing where a serving host requires it."""
    if not (serving or values.get("hf_token_required") is True):
        return None
    token_file = values.get("hf_token_file") if isinstance(values.get("hf_token_file"), str) else None
    file_problem = grammars.token_file_problem(token_file)
    token, token_problem = (None, file_problem) if file_problem else read_token(token_file)
    if token_problem:
        problems.append(Problem(host, "hf_token_file", token_problem))
    elif token is None and values.get("hf_token_required") is True and serving:
        problems.append(Problem(host, "hf_token", "no Hugging Face token: export HF_TOKEN or set hf_token_file "
                                                   "(or hf_token_required: false for public models)"))
    return token


def ngc_api_key(host: str, values: dict[str, Any], needed: bool, problems: list[Problem]) -> str | None:
    """The NGC API key of ngc_api_key_file, read only where it is `needed` (a hub_mirror host whose registry fetches
    images); a problem where the file is set but unreadable or empty. Unset: anonymous pulls (no problem)."""
    path = values.get("ngc_api_key_file")
    if not needed or not isinstance(path, str) or grammars.token_file_problem(path):
        return None
    key, problem = read_secret_file(path)
    if problem:
        problems.append(Problem(host, "ngc_api_key_file", problem))
    return key
