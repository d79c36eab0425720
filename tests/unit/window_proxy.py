"""A loopback TCP proxy in front of a locally served stand-in, for the failure paths of a bench's counter window.

Each connection is relayed whole to the server the proxy points at when the connection arrives (the load client opens
one connection per request), so a test can play, by the count of `GET /metrics` requests rather than by time:
- a server restart at one address: from the Nth read of /metrics on, connections go to another server, started after
  the first (a new process: its counters start again, with their own `_created` series and process start);
- an unreadable read: the Nth read of /metrics is answered 503 and closed, as a server that is not answering would.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class WindowProxy:
    def __init__(self, backend: str, restart_to: str | None = None, restart_after: int = 1,
                 fail_reads: tuple[int, ...] = ()):
        """`backend`, `restart_to`: the servers' base URLs (http://127.0.0.1:PORT). The connections after the
        `restart_after`th read of /metrics go to `restart_to`; the reads numbered in `fail_reads` (from 1) fail."""
        self.backend, self.restart_to, self.restart_after = _address(backend), restart_to, restart_after
        self.fail_reads = set(fail_reads)
        self.metrics_reads = 0
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _route(self, head: bytes) -> tuple[str, int] | None:
        """Where this request goes (None: it fails), counting the reads of /metrics."""
        with self.lock:
            backend = self.backend
            if not head.split(b"\r\n", 1)[0].startswith(b"GET /metrics"):
                return backend
            self.metrics_reads += 1
            if self.restart_to and self.metrics_reads == self.restart_after:
                self.backend = _address(self.restart_to)
            return None if self.metrics_reads in self.fail_reads else backend

    def _serve(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError), client:  # a side that closes first ends the relay
            head = b""
            while b"\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            backend = self._route(head)
            if backend is None:
                client.sendall(UNAVAILABLE)
                return
            with socket.create_connection(backend, timeout=60) as server:
                server.sendall(head)
                _relay(client, server)


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Both directions until each side has closed its half."""
    peer = {a: b, b: a}
    open_ = {a, b}
    while open_:
        ready, _, _ = select.select(list(open_), [], [], 60)
        if not ready:
            return
        for s in ready:
            data = s.recv(65536)
            if data:
                peer[s].sendall(data)
            else:
                open_.discard(s)
                with contextlib.suppress(OSError):
                    peer[s].shutdown(socket.SHUT_WR)


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("//", 1)[1].split(":")
    return host, int(port.rstrip("/"))
