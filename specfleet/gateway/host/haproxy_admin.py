#!/usr/bin/env python3
"""Drain and re-admit a Spark on a gateway through HAProxy's runtime API (its admin socket), and read every
server's state. Shipped to the gateway hosts as one remote command per step (python3 -c <this file> ...); stdlib
only; prints one JSON object.

    state                         every backend server: status, check, agent, current sessions, queue
    drain SERVER --timeout SEC    `set server B/SERVER state drain` in every backend holding SERVER (no new
                                  requests; running ones and streams go on), then wait until none is left or
                                  SEC passed; `drained` says which
    ready SERVER                  `set server B/SERVER state ready` (back in the pool; the checks still apply)
    sync-map MAP [--from FILE]    make the running map MAP equal its file (or FILE), atomically (prepare, add,
                                  commit): a revoked API key is refused on the next request, also kept-alive
    save-state FILE               `show servers state` into FILE (the config loads it after a reload: drains
                                  and agent states survive)

Why not socat: it is not on a minimal host, and the drain needs a loop that reads `show stat` anyway.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import socket
import sys
import time


def ask(sock_path: str, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(sock_path)
        s.sendall(command.encode() + b"\n")
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                return b"".join(chunks).decode()
            chunks.append(data)


def servers(sock_path: str) -> list[dict]:
    """`show stat` of every server of the pools (not the FRONTEND/BACKEND rows, and not a server HAProxy does not
    check: the relay of a Spark's engine metrics, which is no pool member and takes no inference)."""
    text = ask(sock_path, "show stat").lstrip("# ")
    rows = csv.DictReader(io.StringIO(text))
    return [{"backend": r["pxname"], "server": r["svname"], "status": r["status"], "check": r["check_status"],
             "agent": r.get("agent_status", ""), "sessions": int(r["scur"] or 0), "queued": int(r["qcur"] or 0)}
            for r in rows if r.get("svname") not in ("FRONTEND", "BACKEND", None) and r.get("status") != "no check"]


def set_state(sock_path: str, server: str, state: str) -> list[str]:
    """`set server B/server state STATE` in every backend that holds `server`; the backends touched."""
    touched = []
    for row in servers(sock_path):
        if row["server"] == server:
            answer = ask(sock_path, f"set server {row['backend']}/{server} state {state}").strip()
            if answer:
                raise SystemExit(f"haproxy refused `set server {row['backend']}/{server} state {state}`: {answer}")
            touched.append(row["backend"])
    return touched


def drain(sock_path: str, server: str, timeout: float, poll: float = 0.5) -> dict:
    start = time.monotonic()
    backends = set_state(sock_path, server, "drain")
    while True:
        left = sum(r["sessions"] + r["queued"] for r in servers(sock_path) if r["server"] == server)
        waited = time.monotonic() - start
        if left == 0 or waited >= timeout:
            return {"server": server, "backends": backends, "drained": left == 0, "left": left,
                    "waited_s": round(waited, 2)}
        time.sleep(poll)


def sync_map(sock_path: str, map_path: str, source: str | None = None) -> dict:
    """The running map `map_path` := the `key value` lines of `source` (default: its own file), in one transaction
    (HAProxy >= 2.4): either every entry changes or none."""
    text = open(source or map_path, encoding="ascii").read()
    entries = [line.split(None, 1) for line in text.splitlines() if line.strip()]
    answer = ask(sock_path, f"prepare map {map_path}").strip()
    if not answer.rsplit(":", 1)[-1].strip().isdigit():
        raise SystemExit(f"haproxy refused `prepare map {map_path}`: {answer}")
    version = answer.rsplit(":", 1)[-1].strip()
    for key, value in entries:
        answer = ask(sock_path, f"add map @{version} {map_path} {key} {value}").strip()
        if answer:
            raise SystemExit(f"haproxy refused an entry of {map_path}: {answer}")
    answer = ask(sock_path, f"commit map @{version} {map_path}").strip()
    if answer:
        raise SystemExit(f"haproxy refused `commit map @{version} {map_path}`: {answer}")
    return {"map": map_path, "entries": len(entries), "version": int(version)}


def save_state(sock_path: str, path: str) -> dict:
    text = ask(sock_path, "show servers state")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return {"state_file": path, "lines": len(text.splitlines())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("state")
    d = sub.add_parser("drain")
    d.add_argument("server")
    d.add_argument("--timeout", type=float, required=True)
    r = sub.add_parser("ready")
    r.add_argument("server")
    sm = sub.add_parser("sync-map")
    sm.add_argument("map")
    sm.add_argument("--from", dest="source", help="the file to read the entries from (default: MAP's own file)")
    sub.add_parser("save-state").add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "state":
        out: object = servers(a.socket)
    elif a.cmd == "drain":
        out = drain(a.socket, a.server, a.timeout)
    elif a.cmd == "sync-map":
        out = sync_map(a.socket, a.map, a.source)
    elif a.cmd == "save-state":
        out = save_state(a.socket, a.file)
    else:
        out = {"server": a.server, "backends": set_state(a.socket, a.server, "ready")}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
