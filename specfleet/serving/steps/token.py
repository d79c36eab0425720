"""Token: the Hugging Face token, read on the controller, written root-only on the host.

It travels on the SSH channel's stdin into `sh -c 'umask 077; cat > <secrets_dir>/.hf_token.tmp; mv ...'`
run as root (through sudo when the connection uses it, with `_sudo` data or pyinfra's `--sudo`): it is
never on a command line and never written outside the secrets dir, not even as a temporary upload file
(pyinfra's file upload under sudo stages files as the SSH user outside it). It is named only by path
afterwards (HF_TOKEN_PATH for the fetch tool); the serving container never gets it (HF_HUB_OFFLINE=1).
Dropping the token from the inventory removes the file from the host."""

from __future__ import annotations

import shlex

from pyinfra.api import deploy
from pyinfra.operations import files, python

from ...fleet.steps.jobs import run_on_host
from ...fleet.steps.state import current_plan, differs, host_status
from ..render import token_file_text


def _write_token(state, host, path: str, token: str) -> bool:
    tmp = f"{path.rsplit('/', 1)[0]}/.hf_token.tmp"
    script = (f"umask 077 && cat > {shlex.quote(tmp)} && chown root:root {shlex.quote(tmp)} && "
              f"chmod 600 {shlex.quote(tmp)} && mv -f {shlex.quote(tmp)} {shlex.quote(path)}")
    ok, _, err = run_on_host(state, host, f"sh -c {shlex.quote(script)}", stdin=token_file_text(token))
    if not ok:
        host.log_styled(f"writing the token file failed: {' '.join(err[-1:])}", fg="red")
    return ok


@deploy("Hugging Face token")
def token():
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    if differs(plan, s.secrets_dir):
        files.directory(name="Secrets directory (root only)", path=s.secrets_dir, user="root", group="root", mode="700")
    if s.hf_token is None:
        if layout.token_file in host_status(plan).files.found:
            files.file(name="Remove the Hugging Face token (no token in the inventory)", path=layout.token_file,
                       present=False)
        return
    if differs(plan, layout.token_file):
        python.call(name="Hugging Face token (root:root 0600, written from stdin)", function=_write_token,
                    path=layout.token_file, token=s.hf_token.get_secret_value())
