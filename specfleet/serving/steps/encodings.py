"""Encodings: the tiktoken files gpt-oss's Harmony tokenizer reads, staged once and SHA-256 verified.

Each file is downloaded to a temporary name and moved into place only after its hash matches, so the
served directory never holds a bad file."""

from __future__ import annotations

import shlex

from pyinfra.api import deploy
from pyinfra.operations import files, server

from ...fleet.steps.state import current_plan, differs


@deploy("tiktoken encodings")
def encodings():
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    if not (s.profile and s.profile["tiktoken"]):
        return
    if differs(plan, layout.tiktoken):
        files.directory(name="Encodings directory", path=layout.tiktoken, user="root", group="root", mode="755")
    q = shlex.quote  # every value below is quoted: none sits inside hand-written quotes
    for name, digest in s.tiktoken_sha256.items():
        dest = f"{layout.tiktoken}/{name}"
        if not differs(plan, dest):
            continue
        tmp = f"{dest}.part"
        url = f"{s.tiktoken_base_url}/{name}"
        checksum_line = f"{digest}  {tmp}"
        failure = f"{name} from {url} failed the download or SHA-256 check (tiktoken_base_url / tiktoken_sha256)"
        server.shell(name=f"Fetch {name} (SHA-256 verified)", commands=[
            f"curl -fsSL --retry 3 -o {q(tmp)} {q(url)}"
            f" && printf '%s\\n' {q(checksum_line)} | sha256sum -c --quiet -"
            f" || {{ rm -f {q(tmp)}; printf '%s\\n' {q(failure)} >&2; exit 1; }}",
            f"chown root:root {q(tmp)} && chmod 644 {q(tmp)} && mv -f {q(tmp)} {q(dest)}",
        ])
