"""Token: the Hugging Face token, read on the controller, written root-only on the host.

It travels inside the SSH/SFTP channel from memory into a 0700 directory, never on a command line,
and is named only by path afterwards (HF_TOKEN_PATH for the fetch tool). The serving container never
gets it (it runs with HF_HUB_OFFLINE=1)."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.facts.server import Home
from pyinfra.operations import files

from ._common import current_plan, differs


@deploy("Hugging Face token")
def token():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    if differs(plan, s.secrets_dir):
        files.directory(name="Secrets directory (root only)", path=s.secrets_dir, user="root", group="root", mode="700")
    if s.hf_token is None or not differs(plan, p.token_file):
        return
    staging = {}
    if host.data.get("_sudo"):
        # With sudo, pyinfra uploads as the SSH user to a temp file, then copies it as root. Keep that
        # temp file in a directory only the SSH user can enter, never in the world-readable /tmp.
        upload_dir = f"{host.get_fact(Home, _sudo=False)}/.specfleet-upload"
        files.directory(name="Private upload directory (0700)", path=upload_dir, mode="700", _sudo=False)
        staging = {"_temp_dir": upload_dir}
    files.put(name="Hugging Face token (root:root 0600)", src=StringIO(s.hf_token.get_secret_value() + "\n"),
              dest=p.token_file, user="root", group="root", mode="600", **staging)
