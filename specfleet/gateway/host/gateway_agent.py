#!/usr/bin/env python3
"""The readiness agent of a Spark behind the fleet's gateways (HAProxy's agent-check): one word per connection,
`up` or `down`, then close. HAProxy sends a server traffic only while its /health check passes AND the agent's
last word was `up`; the agent answers only `up`/`down` (never ready/drain/maint, which would undo a drain that the
controller set over HAProxy's runtime API).

`up` means: the release that `current` points at has passed specfleet's readiness gate, and the serving container
has not been (re)started since (systemd restarting it on its own puts the host back only after a new gate).
The state is read by THE reader, release_state.py, installed next to this file; the start marker is touched on
every start by a drop-in beside the unit (ExecStartPre; the release's unit is the same as without gateways), and
the gate records the marker it saw when it passed (`started`). No marker yet (a Spark that just joined): its gate
stands until the first start.

Runs as a long-lived stdlib process (one per host: a check every agent-inter from each gateway costs no process
start). It takes its listening socket from systemd (socket activation, LISTEN_FDS; the socket unit's
IPAddressAllow= admits the gateways only) or binds --listen for tests.
"""

from __future__ import annotations

import argparse
import os
import socket
import socketserver
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # release_state.py and layout.py are installed next to it
import drain  # noqa: E402
import release_state  # noqa: E402
from layout import Layout, lock_kind  # noqa: E402

SD_LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed socket
DRAINING = "a host job is switching or gating this host"


def readiness(layout: Layout) -> tuple[str, str]:
    """(`up`|`down`, why) of this host, from its release state (release_state.pool_state: files only, no systemctl,
    so an answer never waits on a busy systemd during a switch)."""
    state = release_state.pool_state(layout)
    current, gate = state["current"], state["gate"]
    if gate.get("result") == "running":  # a host job is switching or gating: drained (drain.py)
        return "down", DRAINING
    if lock_kind(state["lock"]) == "bench":  # variants under test are not the fleet's release
        return "down", "held out of the pool by a bench run"
    if not current:
        return "down", "no release installed"
    if gate.get("release") != current:
        return "down", f"no gate result for {current}"
    if gate.get("result") != "passed":
        return "down", f"gate {gate.get('result')} for {current}"
    if not release_state.gate_holds(state):
        return "down", "the serving container started again since its gate passed"
    return "up", f"{current} passed its gate"


class Agent(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, layout: Layout, sock: socket.socket | None, listen: tuple[str, int] | None):
        self.layout = layout

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                word, why = readiness(layout)
                self.request.sendall(f"{word}\n".encode())
                if why == DRAINING:  # the host job waits until every gateway has heard it (drain.py)
                    drain.record_ack(layout.agent_acks, self.client_address[0])

        super().__init__(listen or ("127.0.0.1", 0), Handler, bind_and_activate=sock is None)
        if sock is not None:
            self.socket.close()
            self.socket = sock


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--listen", help="HOST:PORT to bind (tests); default: the socket systemd passes")
    ap.add_argument("--once", action="store_true", help="print this host's word and why, and exit")
    a = ap.parse_args(argv)
    layout = Layout(a.data_dir)
    if a.once:
        print(*readiness(layout), sep="\t")
        return 0
    if a.listen:
        host, _, port = a.listen.rpartition(":")
        server = Agent(layout, None, (host, int(port)))
    elif os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS") == "1":
        server = Agent(layout, socket.socket(fileno=SD_LISTEN_FDS_START), None)
    else:
        print("gateway-agent: no socket from systemd (LISTEN_FDS) and no --listen", file=sys.stderr)
        return 2
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
