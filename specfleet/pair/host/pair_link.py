#!/usr/bin/env python3
"""pair-link: a pair host's ConnectX-7 link, applied by netplan in a way that cannot cut the management connection.

  management         JSON: the interfaces this host's SSH sessions use (their local address, and the route back to
                     their peer), read from `ss` and `ip`.
  apply --interfaces A,B --addresses X/N,Y/N --confirm-sec S
                     install the staged netplan (<data_dir>/pair/netplan.yaml, rendered by pair_files.netplan) as
                     NETPLAN_FILE and try it; exit 0 once every link interface has its address, the change awaiting
                     `confirm`. Refused (exit 2, nothing changed) when the link touches a management interface.
                     Unchanged file and addresses present: nothing to do (exit 0).
  confirm [--wait S] keep the change being tried (exit 0 once netplan accepted it; 1 if it was reverted).
  try --timeout S    (run by `apply` as the transient unit PAIR_LINK_UNIT, so a dropped SSH session cannot stop it)

The engine is `netplan try` (netplan.io): it applies, and reverts the running network by itself unless accepted
within its timeout (SIGUSR1 accepts, SIGINT rejects, and it touches NETPLAN_TRY_READY once applied: netplan-try(8)
and canonical/netplan's try_command.py, the same in 0.106 (Debian 12) and 1.x (Ubuntu 24.04, DGX OS)). What netplan
leaves to its caller, this does: refusing a plan on the management interfaces before anything changes, confirming
only when the controller comes back over SSH after the change (`confirm` is its next command), and putting
NETPLAN_FILE back as it was when the change is reverted (netplan try restores the running state, not the files in
/etc/netplan). Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # installed next to the host tool and its modules
from hostlib import Fail, atomic_write, now_iso, poll_until, read_json, say, sh  # noqa: E402
from layout import NETPLAN_FILE, NETPLAN_TRY_READY, PAIR_LINK_TOOL, PAIR_LINK_UNIT, Layout  # noqa: E402

VERIFY_SEC = 20  # how long `apply` waits for the link's addresses once netplan applied them
START_SEC = 60  # how long `apply` waits for `netplan try` to have applied (its backup and generate included)
ENDED = ("accepted", "reverted", "failed")


def _ip_of(endpoint: str) -> tuple[str, str | None]:
    """`10.0.2.15:22`, `[::ffff:10.0.2.15]:22`, `[fe80::1%eth0]:22` -> (address, interface named by a zone)."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    host, _, zone = host.partition("%")
    return host.removeprefix("::ffff:"), zone or None


def addresses() -> dict[str, str]:
    """address/prefix -> interface, from `ip -o addr show`."""
    out = {}
    for line in sh("ip", "-o", "addr", "show").stdout.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[2] in ("inet", "inet6"):
            out[cols[3]] = cols[1].rstrip(":").split("@")[0]
    return out


def _route_dev(address: str) -> str | None:
    words = sh("ip", "-o", "route", "get", address, check=False).stdout.split()
    return words[words.index("dev") + 1] if "dev" in words[:-1] else None


def management_interfaces() -> set[str]:
    """The interfaces of every established SSH session (sshd's sockets): the one holding its local address and the
    one the route back to its peer leaves by. Any of them may be the controller's way in."""
    owners = {a.split("/")[0]: ifname for a, ifname in addresses().items()}
    found: set[str] = set()
    for line in sh("ss", "-Htnp", "state", "established").stdout.splitlines():
        cols = line.split()
        if len(cols) < 5 or '"sshd' not in line:
            continue
        (local, local_zone), (peer, _) = _ip_of(cols[2]), _ip_of(cols[3])
        found.update(x for x in (local_zone, owners.get(local), _route_dev(peer)) if x)
    return found


def _have(interfaces: list[str], wanted: list[str]) -> bool:
    present = addresses()
    return all(present.get(a) == i for i, a in zip(interfaces, wanted))


def _state(lay: Layout) -> dict:
    return read_json(Path(lay.link_state)) or {}


def _set_state(lay: Layout, state: str, **more) -> None:
    atomic_write(Path(lay.link_state), json.dumps({"state": state, "at": now_iso(), **more}) + "\n", 0o600)


def _unit_active() -> bool:
    return sh("systemctl", "is-active", "--quiet", f"{PAIR_LINK_UNIT}.service", check=False).returncode == 0


def apply(lay: Layout, args) -> int:
    touched = sorted(set(args.interfaces) & management_interfaces())
    if touched:
        say(f"{args.netplan_file}: the link would change {', '.join(touched)}, which carries this host's SSH "
            "connection (a management interface); nothing was changed (the link takes the ConnectX-7 interfaces "
            "only)", err=True)
        return 2
    target, staged = Path(args.netplan_file), Path(lay.netplan_staged).read_text()
    current = target.read_text() if target.exists() else None
    if current == staged and _have(args.interfaces, args.addresses):
        say(f"{target}: unchanged, the link's addresses are up")
        return 0
    if _unit_active():
        raise Fail(f"a link change is still being tried ({PAIR_LINK_UNIT}); confirm it or let it revert first")
    atomic_write(Path(lay.netplan_previous), json.dumps({"content": current}) + "\n", 0o600)
    Path(lay.link_confirm).unlink(missing_ok=True)
    _set_state(lay, "starting")
    atomic_write(target, staged, 0o600)
    started = sh("systemd-run", f"--unit={PAIR_LINK_UNIT}", "--collect", "--quiet", sys.executable,
                 str(Path(__file__).resolve()), "--data-dir", lay.data_dir, "try", "--timeout", str(args.confirm_sec),
                 "--netplan-file", str(target), "--ready-stamp", args.ready_stamp, check=False)
    state = {} if started.returncode else \
        poll_until(lambda: _state(lay), lambda s: s.get("state") != "starting", wait=args.start_sec)
    if started.returncode or state.get("state") == "starting":
        state = _never_tried(lay, target, started)
    if state.get("state") != "trying":
        raise Fail(f"netplan try did not apply the link: {state.get('why') or state.get('state')}")
    if not poll_until(lambda: _have(args.interfaces, args.addresses), bool, wait=args.verify_sec):
        atomic_write(Path(lay.link_confirm), "reject\n", 0o600)
        state = poll_until(lambda: _state(lay), lambda s: s.get("state") in ENDED, wait=START_SEC)
        raise Fail(f"{', '.join(args.interfaces)} did not get {', '.join(args.addresses)} within {args.verify_sec} s: "
                   f"the change was rejected ({state.get('state')}: {state.get('why', '')})")
    say(f"{target}: applied, {', '.join(args.interfaces)} up with {', '.join(args.addresses)}; netplan reverts it "
        f"in {args.confirm_sec} s unless confirmed")
    return 0


def _never_tried(lay: Layout, target: Path, started: subprocess.CompletedProcess) -> dict:
    """The try unit did not report within its time: a unit still running is told to give up (its netplan reverts
    and it puts the file back); one that never ran or died first leaves that to apply, so no untried file stays in
    /etc/netplan for the next boot to apply."""
    if started.returncode == 0 and _unit_active():
        atomic_write(Path(lay.link_confirm), "abandon\n", 0o600)
        return poll_until(lambda: _state(lay), lambda s: s.get("state") in ENDED, wait=START_SEC)
    _put_back(lay, target)
    why = (f"systemd-run failed: {(started.stderr or started.stdout).strip() or started.returncode}"
           if started.returncode else f"{PAIR_LINK_UNIT} ended without trying the change")
    _set_state(lay, "failed", why=why)
    return _state(lay)


def _put_back(lay: Layout, target: Path) -> None:
    previous = (read_json(Path(lay.netplan_previous)) or {}).get("content")
    if previous is None:
        target.unlink(missing_ok=True)
    else:
        atomic_write(target, previous, 0o600)


def confirm(lay: Layout, args) -> int:
    state = _state(lay)
    if state.get("state") != "trying":
        say(f"no link change awaits confirmation (last: {state.get('state', 'none')})")
        return 0 if state.get("state") in (None, "accepted") else 1
    atomic_write(Path(lay.link_confirm), "accept\n", 0o600)
    state = poll_until(lambda: _state(lay), lambda s: s.get("state") in ENDED, wait=args.wait)
    say(f"link change {state.get('state')}" + (f": {state['why']}" if state.get("why") else ""))
    return 0 if state.get("state") == "accepted" else 1


def _answer(proc: subprocess.Popen, lay: Layout) -> str | None:
    """Pass the controller's answer to netplan try (SIGUSR1 accepts, SIGINT rejects) until netplan ends."""
    sent = None
    while proc.poll() is None:
        word = Path(lay.link_confirm).read_text().strip() if Path(lay.link_confirm).exists() else None
        if word in ("accept", "reject", "abandon") and sent is None:
            proc.send_signal(signal.SIGUSR1 if word == "accept" else signal.SIGINT)
            sent = word
        time.sleep(0.25)
    return sent


def _netplan_error(said: str) -> str:
    """netplan's reason for a failed try: its `An error occurred: ...` line or its `FILE:LINE:COL: message` line
    (0.106 prints the offending source line and a `^` under a YAML error), else its last line that says something."""
    lines = [x.strip() for x in said.replace("\r", "\n").splitlines()]
    for x in lines:
        if x.startswith("An error occurred:") or re.match(r"\S+\.yaml:\d+:\d+: ", x):
            return x
    useful = [x for x in lines if x.strip("^ ") and not x.startswith(("Cannot call openvswitch", "Changes will"))]
    return (useful or ["no output"])[-1]


def try_(lay: Layout, args) -> int:
    """Run `netplan try` and follow it; on any end but an accepted change, put NETPLAN_FILE back as it was."""
    Path(args.ready_stamp).unlink(missing_ok=True)
    stdin_r, stdin_w = os.pipe()  # netplan try reads its stdin for ENTER: an open pipe that never delivers one
    log_fd = os.open(lay.link_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(log_fd, 0o600)  # netplan's output names the link's addresses: root's only, like the rest of pair/
    with open(log_fd, "w") as log:
        proc = subprocess.Popen(["netplan", "try", "--timeout", str(args.timeout)], stdin=stdin_r, stdout=log,
                                stderr=subprocess.STDOUT)
    os.close(stdin_r)
    ready = poll_until(lambda: Path(args.ready_stamp).exists() or proc.poll() is not None, bool, wait=START_SEC)
    if ready and proc.poll() is None:
        _set_state(lay, "trying", timeout=args.timeout)
    sent = _answer(proc, lay)
    os.close(stdin_w)
    said = Path(lay.link_log).read_text()
    if "Configuration accepted" in said:
        _set_state(lay, "accepted")
        Path(lay.netplan_previous).unlink(missing_ok=True)
        return 0
    _put_back(lay, Path(args.netplan_file))
    failed = "An error occurred" in said or "Reverting" not in said  # netplan's own failure, not a revert
    why = ("rejected: the link's addresses did not come up" if sent == "reject" else
           "abandoned: netplan try had not applied when apply stopped waiting" if sent == "abandon" else
           f"netplan try failed: {_netplan_error(said)}" if failed else f"not confirmed within {args.timeout} s")
    _set_state(lay, "failed" if failed else "reverted", why=why)
    return 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PAIR_LINK_TOOL, description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("management")
    for name in ("apply", "try"):
        p = sub.add_parser(name)
        p.add_argument("--netplan-file", default=NETPLAN_FILE)
        p.add_argument("--ready-stamp", default=NETPLAN_TRY_READY)
    sub.choices["apply"].add_argument("--interfaces", type=lambda v: v.split(","), required=True)
    sub.choices["apply"].add_argument("--addresses", type=lambda v: v.split(","), required=True)
    sub.choices["apply"].add_argument("--confirm-sec", type=int, required=True)
    sub.choices["apply"].add_argument("--verify-sec", type=float, default=VERIFY_SEC)
    sub.choices["apply"].add_argument("--start-sec", type=float, default=START_SEC)
    sub.choices["try"].add_argument("--timeout", type=int, required=True)
    sub.add_parser("confirm").add_argument("--wait", type=float, default=30)
    args = ap.parse_args(argv)
    lay = Layout(args.data_dir)
    Path(lay.pair_dir).mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if args.cmd == "management":
            print(json.dumps({"management": sorted(management_interfaces())}))
            return 0
        return {"apply": apply, "confirm": confirm, "try": try_}[args.cmd](lay, args)
    except Fail as e:
        say(f"{PAIR_LINK_TOOL}: {e}", err=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
