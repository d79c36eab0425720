"""What the STAND-IN servers (tests/vm/trtllm_standin, tests/vm/vllm_standin) say about a client's credentials.

Neither trtllm-serve (no API-key option) nor `vllm serve` as specfleet runs it (no `--api-key`) has any use for a
client's credentials, so a credential header that reaches one came through a gateway that should have removed it.
Each stand-in logs the NAMES of the credential-like headers a request carries, never their values, in one
CREDENTIALS_SEEN line, so that a test can tell what reached a Spark.

Python 3 standard library only, and nothing of specfleet's: the trtllm-serve stand-in's image ships this file on
python3's path (tests/vm/trtllm_standin/image.py), and the vLLM stand-in's image is derived from that one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# a header whose name says it carries a credential (any client's: OpenAI's Authorization, Azure's api-key,
# x-api-key, x-goog-api-key, Proxy-Authorization, cookies): broader than what a gateway removes, so a test sees a miss
CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|cookie|session", re.I)
CREDENTIALS_SEEN = "STAND-IN: credential header(s) received"


def credentials_line(header_names: Iterable[str], method: str, path: str) -> str | None:
    """The line a stand-in logs for a request whose headers have these names (None: no credential-like header).
    Names only: a value is a secret, and this goes to the journal."""
    seen = sorted({name.lower() for name in header_names if CREDENTIAL_HEADER.search(name)})
    if not seen:
        return None
    return f"{CREDENTIALS_SEEN}: {', '.join(seen)} (values not logged) on {method} {path.split('?', 1)[0]}"
