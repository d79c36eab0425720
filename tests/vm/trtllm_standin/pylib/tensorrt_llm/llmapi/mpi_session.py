"""STAND-IN `tensorrt_llm.llmapi.mpi_session` -- this is NOT TensorRT-LLM.

How a trtllm-serve started by trtllm-llmapi-launch reaches the MPI world, in the shape of upstream's
RemoteMpiCommSessionServer (rank 0's mgmn_leader_node) and RemoteMpiCommSessionClient (the trtllm-serve process,
which the launcher starts without the MPI environment): the server holds MPI.COMM_WORLD and listens on
$TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR (tcp://127.0.0.1:PORT), the client proves $TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY.
Upstream sends pickled tasks over ZeroMQ; the stand-in has no tasks to send, so its wire is one JSON line each way
over a plain socket (stdlib), and it keeps what the deployment can see:
- the server listens only once every rank of the world is up (MPI_Init returns when every rank has joined, then a
  gather over MPI.COMM_WORLD names their hosts), so a trtllm-serve with tp_size 2 cannot load while a rank is missing;
- the client learns the world's size and hosts, and its connection stays open: when the leader goes (a rank died
  and mpirun ended the job), the client sees it at once;
- `stop` (mgmn_leader_node --action stop, sent when trtllm-serve ends) tells every worker rank to exit.
"""

import hmac
import json
import os
import select
import socket
import time

STOP_TAG = 7  # the MPI tag of the leader's stop message to the worker ranks
CLIENT_TIMEOUT_S = 5  # how long the leader waits for a connected client's line


class SessionRefused(Exception):
    """The leader closed the connection without an answer: the client's key is not the launch's."""


def ipc_address():
    host, _, port = os.environ["TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR"].removeprefix("tcp://").rpartition(":")
    return host, int(port)


def _key():
    return os.environ["TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY"]


def _send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def _line(sock, limit=4096):
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = sock.recv(1)
        if not chunk:
            return None
        data += chunk
    return json.loads(data)


class RemoteMpiCommSessionServer:
    """Rank 0's side: the world's hosts, then one listener for the LLM API process until `stop`."""

    def __init__(self, comm, log):
        self.comm, self.log = comm, log
        self.hosts = comm.gather(socket.gethostname(), root=0)  # returns once every rank has called it
        self.log(f"MPI Comm Server: {len(self.hosts):d} ranks up ({', '.join(self.hosts)})")

    def serve(self):
        listener = socket.create_server(ipc_address())
        self.log(f"MPI Comm Server listening on {os.environ['TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR']}")
        clients = []
        while True:
            ready, _, _ = select.select([listener, *clients], [], [], 1.0)
            for sock in ready:
                if sock is listener:
                    clients.append(listener.accept()[0])
                    clients[-1].settimeout(CLIENT_TIMEOUT_S)
                    continue
                try:
                    msg = _line(sock)
                except (OSError, ValueError):  # a client that stalls or sends what is not a line of JSON
                    msg = None
                if not isinstance(msg, dict) or not hmac.compare_digest(str(msg.get("key", "")), _key()):
                    clients.remove(sock)
                    sock.close()
                elif msg.get("action") == "stop":
                    return self._stop()
                else:
                    _send(sock, {"world_size": len(self.hosts), "hosts": self.hosts})

    def _stop(self):
        for rank in range(1, len(self.hosts)):
            self.comm.send("stop", dest=rank, tag=STOP_TAG)
        self.log("MPI Comm Server stopped")


def worker(comm, log):
    """A worker rank: report, then wait (polling, not MPI's busy wait) for the leader's stop."""
    comm.gather(socket.gethostname(), root=0)
    log(f"mgmn worker node rank {comm.Get_rank():d} up, waiting for tasks")
    request = comm.irecv(source=0, tag=STOP_TAG)
    while not request.test()[0]:
        time.sleep(0.2)
    log(f"mgmn worker node rank {comm.Get_rank():d} stopped")


class RemoteMpiCommSessionClient:
    """trtllm-serve's side: connect (the leader listens only once the whole world is up) and learn the world."""

    def __init__(self):
        self.sock = socket.create_connection(ipc_address(), timeout=2)
        self.sock.settimeout(None)
        _send(self.sock, {"key": _key(), "action": "hello"})
        self.world = _line(self.sock)
        if self.world is None:
            raise SessionRefused(f"the MPI session at {os.environ['TLLM_SPAWN_PROXY_PROCESS_IPC_ADDR']} closed the "
                                 "connection without an answer (TLLM_SPAWN_PROXY_PROCESS_IPC_HMAC_KEY is not the "
                                 "launch's)")

    def closed(self):
        """Block until the leader's end of the connection closes (or resets)."""
        try:
            while self.sock.recv(4096):
                pass
        except OSError:
            pass


def stop():
    """mgmn_leader_node --action stop. Upstream's ZeroMQ connect waits for its server, so a stop sent before the
    leader listens (trtllm-serve refused at once) still arrives: the stand-in retries until it does."""
    while True:
        try:
            with socket.create_connection(ipc_address(), timeout=5) as sock:
                return _send(sock, {"key": _key(), "action": "stop"})
        except ConnectionRefusedError:
            time.sleep(0.2)
