"""The lab's two errors: anything that went wrong with a guest, and a remote command that failed."""

from __future__ import annotations

import subprocess


class VMError(RuntimeError):
    """Anything that went wrong bringing up, reaching or tearing down a guest."""


class SSHError(subprocess.CalledProcessError):
    def __str__(self) -> str:  # include what the remote side said
        base = super().__str__()
        err = (self.stderr or "").strip()
        out = (self.output or "").strip()
        tail = "\n".join((err or out).splitlines()[-20:])
        return f"{base}\n{tail}" if tail else base
