"""THE reader of a host's release state: which release is current and which previous, the kept releases, the
current release's record, the readiness gate's last result, the run lock's owner and the active host job.

Stdlib only, and no import of its siblings, so that it runs in two ways with the same code:
- installed next to the host tool (<data_dir>/bin/release_state.py), which imports it;
- shipped in a read-only remote command as `python3 -c <this file's text> '<paths as JSON>'`, which prints `read()`
  as one JSON object. The converge's status probe (probes/host_status.sh) and `specfleet status`
  (probes/overview.py) read it that way, so a host whose installed tools are older, or absent, reads the same.

Paths and names come from host/layout.py (none is written here): `paths` is a layout.Layout, or the JSON of
`layout.Layout.release_paths()`.
"""

import json
import os
import subprocess
import sys

# What `paths` must hold (layout.Layout.release_paths() names them all, the two file/unit names included).
_FIELDS = ("current", "previous", "releases", "gate_file", "lock_owner", "active_job", "jobs", "record_file",
           "job_unit_prefix", "started_marker")


def _text(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_json(path):
    """A JSON object file, or None when it is missing, unreadable or not an object (e.g. cut short)."""
    try:
        with open(path) as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def current(paths):
    """The id `current` points at (None: no release installed)."""
    try:
        return os.path.basename(os.readlink(paths.current)) or None
    except OSError:
        return None


def previous(paths):
    """The id recorded as previous, as written (the host tool checks its record exists before using it)."""
    return _text(paths.previous) or None


def release_ids(paths):
    """The kept releases' ids (directory names), sorted; a hidden one is a release being staged, not yet one."""
    try:
        return sorted(e.name for e in os.scandir(paths.releases)
                      if e.is_dir(follow_symlinks=False) and not e.name.startswith("."))
    except OSError:
        return []


def record(paths, release):
    """A release's record (its record_file), or None when missing or damaged."""
    return read_json(os.path.join(paths.releases, release, paths.record_file)) if release else None


def records(paths):
    """Every kept release's record, newest first (damaged ones left out)."""
    found = (record(paths, rid) for rid in release_ids(paths))
    return sorted((r for r in found if r and "id" in r), key=lambda r: (r.get("created", ""), r["id"]), reverse=True)


def gate(paths):
    """The readiness gate's last result: {"release", "result": running|passed|failed, "at", ...} ({} if none)."""
    return read_json(paths.gate_file) or {}


def started(paths):
    """When the serving container last started (the mtime of the marker a drop-in of its unit touches behind
    gateways); None without a marker (no gateways, or none since the Spark joined one: no start since)."""
    try:
        return os.stat(paths.started_marker).st_mtime
    except OSError:
        return None


def gate_holds(state):
    """Whether the current release's gate passed and still holds: passed for `current`, and the container has not
    started again since: the gate records the marker it saw, and a marker that moved since means a start the gate
    did not see. No marker: no start since the marking began (a Spark that just joined a gateway, or none at all),
    so the gate's result stands. `state`: a dict with current, gate and started, as `read` or `pool_state` give."""
    gate_, marked = state.get("gate") or {}, state.get("started")
    return (bool(state.get("current")) and gate_.get("release") == state.get("current")
            and gate_.get("result") == "passed" and (marked is None or gate_.get("started") == marked))


def pool_state(paths):
    """What the gateways' readiness agent needs, cheap enough for a check every few seconds (no systemctl)."""
    return {"current": current(paths), "gate": gate(paths), "lock": lock_owner(paths), "started": started(paths)}


def lock_owner(paths):
    """The owner line of the host's run lock ("<kind> <run id> ..."), None when no lock is held."""
    return _text(paths.lock_owner)


def active_job_id(paths):
    """The id recorded as the host's active job (None: none); whether it still runs is active_job's question."""
    return _text(paths.active_job) or None


def active_job(paths):
    """The active host job as {"id", "key", "unit"} (unit: systemctl is-active of its transient unit), or None."""
    jid = active_job_id(paths)
    if not jid:
        return None
    spec = read_json(os.path.join(paths.jobs, jid, "job.json")) or {}
    try:
        unit = subprocess.run(["systemctl", "is-active", paths.job_unit_prefix + jid], capture_output=True, text=True,
                              timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        unit = ""
    return {"id": jid, "key": spec.get("key", ""), "unit": unit}


def read(paths):
    """Everything above, as one JSON-able object."""
    cur = current(paths)
    return {"current": cur, "previous": previous(paths), "releases": release_ids(paths),
            "record": record(paths, cur) or {}, "gate": gate(paths), "lock": lock_owner(paths),
            "job": active_job(paths), "started": started(paths)}


class _Paths:
    def __init__(self, mapping):
        missing = [k for k in _FIELDS if not isinstance(mapping.get(k), str)]
        if missing:
            raise SystemExit("release_state: paths lack " + " ".join(missing))
        self.__dict__.update({k: mapping[k] for k in _FIELDS})


if __name__ == "__main__":
    print(json.dumps(read(_Paths(json.loads(sys.argv[1])))))
