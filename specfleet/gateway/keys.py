"""The gateway's client API keys, read on the controller like the HF token: from gateway_api_keys_file when set,
else from the SPECFLEET_API_KEYS environment variable (the same text). One key per line, `NAME KEY`; blank lines
and lines starting with `#` are skipped. NAME labels the key in the gateway's logs and metrics; KEY is the secret
a client sends as `Authorization: Bearer KEY`. The gateway host receives only SHA-256 digests of the keys
(gateway_files.keys_map). No message here ever shows a key: problems name the source and the line number."""

from __future__ import annotations

import os
import re
import ssl
from pathlib import Path

ENV_VAR = "SPECFLEET_API_KEYS"
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_KEY = re.compile(r"[\x21-\x7e]{16,256}")  # printable ASCII without spaces (a bearer token), 16..256 characters
RULE = ("allowed: one `NAME KEY` per line; NAME of letters, digits, '_', '.', '-' (at most 64); KEY of 16 to 256 "
        "printable ASCII characters without spaces")


def parse_keys(text: str, source: str) -> tuple[dict[str, str], list[str]]:
    """(name -> key, problems) of a keys text; a problem names the source and line, never the key."""
    keys: dict[str, str] = {}
    seen: dict[str, int] = {}
    problems = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not _NAME.fullmatch(parts[0]) or not _KEY.fullmatch(parts[1]):
            problems.append(f"{source} line {number} is not a valid key line ({RULE})")
            continue
        name, key = parts
        if name in keys:
            problems.append(f"{source} line {number}: the name {name} is used twice (allowed: one key per name)")
        elif key in seen:
            problems.append(f"{source} line {number}: the same key as line {seen[key]} (allowed: a key of its own)")
        else:
            keys[name], seen[key] = key, number
    if not keys and not problems:
        problems.append(f"{source} holds no key, so no client could use the gateway ({RULE})")
    return keys, problems


def read_keys(keys_file: str | None) -> tuple[dict[str, str], list[str]]:
    """(name -> key, problems) from gateway_api_keys_file if set, else from $SPECFLEET_API_KEYS."""
    if keys_file:
        try:
            text = Path(keys_file).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            return {}, [f"cannot read {keys_file}: {exc.strerror}"]
        except UnicodeDecodeError:
            return {}, [f"{keys_file} is not UTF-8 text"]
        return parse_keys(text, keys_file)
    if ENV_VAR not in os.environ:
        return {}, [f"no API keys: set gateway_api_keys_file or export {ENV_VAR} (a gateway never runs without keys)"]
    return parse_keys(os.environ[ENV_VAR], f"${ENV_VAR}")


def gateway_secrets(s) -> tuple[dict[str, str], str | None, list[str]]:
    """A gateway host's secrets, read on the controller: (keys, the TLS pem text (certificate chain + key) or None,
    problems as `VAR: message`). No message shows a secret."""
    keys, problems = read_keys(s.gateway_api_keys_file)
    out = [f"gateway_api_keys_file: {p}" for p in problems]
    pem = None
    if s.gateway_tls_cert_file:
        parts = []
        for var in ("gateway_tls_cert_file", "gateway_tls_key_file"):
            path = getattr(s, var)
            try:
                text = Path(path).expanduser().read_text(encoding="ascii")
            except OSError as exc:
                out.append(f"{var}: cannot read {path}: {exc.strerror}")
                continue
            except UnicodeDecodeError:
                out.append(f"{var}: {path} is not PEM text (allowed: a PEM file, ASCII)")
                continue
            if "-----BEGIN " not in text:
                out.append(f"{var}: {path} holds no PEM block (allowed: a PEM file with -----BEGIN ...)")
            parts.append(text if text.endswith("\n") else text + "\n")
        pem = "".join(parts)
        if not out:
            out += _pair_problems(s.gateway_tls_cert_file, s.gateway_tls_key_file)
    return keys, pem, out


def _pair_problems(cert: str, key: str) -> list[str]:
    """The pair as TLS will load it (Python's ssl, OpenSSL as HAProxy uses it): a swapped, encrypted or mismatched
    pair is refused on the controller, before the gateway's own `haproxy -c`."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            str(Path(cert).expanduser()), str(Path(key).expanduser()), password=lambda: b"")
    except ssl.SSLError as exc:
        return [f"gateway_tls_key_file: {key} does not load with {cert} ({exc.reason or 'invalid'}; allowed: the "
                "certificate chain and its unencrypted private key, PEM)"]
    return []
