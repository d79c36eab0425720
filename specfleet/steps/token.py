"""Token: the Hugging Face token, read on the controller, written root-only on the host.

It travels inside the SSH/SFTP channel from memory into a 0700 directory, never on a command line,
and is named only by path afterwards (HF_TOKEN_PATH for the fetch tool). The serving container never
gets it (it runs with HF_HUB_OFFLINE=1)."""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files

from ._common import current_plan


@deploy("Hugging Face token")
def token():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    files.directory(name="Secrets directory (root only)", path=s.secrets_dir, user="root", group="root", mode="700")
    if s.hf_token is not None:
        files.put(name="Hugging Face token (root:root 0600)", src=StringIO(s.hf_token.get_secret_value() + "\n"),
                  dest=p.token_file, user="root", group="root", mode="600")
