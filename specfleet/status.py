"""What the read-only commands read from hosts: `specfleet status` (ONE read-only remote command per host, run
through pyinfra's API; status_report.py makes the rows), `specfleet mirror status` (the mirror hosts' MirrorStatus)
and `specfleet logs HOST [-f] [-n N]` (the unit's journal over SSH with the inventory's connection data).

/metrics drains: trtllm-serve removes the iteration stats it returns. So `status` reads /metrics only with
`--metrics`, and even then not on a host whose run lock is held by a `specfleet bench` (its load client is
collecting those stats); the figures then cover the iterations since the previous reader, not since start."""

from __future__ import annotations

import json
import shlex
import subprocess

from pyinfra import host
from pyinfra.api import FactBase, deploy

from . import runner
from .mirror import MirrorState, MirrorStatus
from .plan import HostPlan, PlanError
from .steps._common import current_plan

# Runs on the host with python3 (specfleet's host tools need it too); prints one JSON object. Read-only except
# for /metrics, which it reads (and so drains) only when asked and no bench holds the host's lock.
_PROBE = r'''
import json, os, re, shutil, subprocess, sys, time, urllib.request
data, svc, want_metrics = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
out = {"service": svc}
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""
def jread(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except Exception:
        return {}
cur = os.path.basename(os.path.realpath(os.path.join(data, "current"))) if os.path.islink(os.path.join(data, "current")) else None
rec = jread(os.path.join(data, "releases", cur, "release.json")) if cur else {}
out.update(release=cur, profile=rec.get("profile"), image=rec.get("image"), url=rec.get("url"))
svc = rec.get("service") or svc
out["unit"] = sh("systemctl", "is-active", svc) or "unknown"
out["gate"] = jread(os.path.join(data, "gate.json"))
try:
    with open(os.path.join(data, "lock", "owner")) as fh:
        out["lock"] = fh.read().strip()
except OSError:
    out["lock"] = None
started = sh("docker", "inspect", "--format", "{{.State.Running}} {{.State.StartedAt}}", svc)
out["uptime_s"] = None
if started.startswith("true "):
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", started.split()[1])
    if m:
        import calendar
        out["uptime_s"] = max(0, int(time.time() - calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))))
def get(path, timeout=5):
    with urllib.request.urlopen(rec["url"] + path, timeout=timeout) as r:
        return r.status, r.read()
out["health"] = None
if rec.get("url"):
    try:
        out["health"] = get("/health")[0]
    except urllib.error.HTTPError as e:
        out["health"] = e.code
    except Exception as e:
        out["health"] = "%s" % (getattr(e, "reason", None) or e)
try:
    with open(os.path.join(data, "releases", cur or "-", "extra-llm-api-config.yml")) as fh:
        stats_on = re.search(r"^enable_iter_perf_stats:\s*true\s*$", fh.read(), re.M) is not None
except OSError:
    stats_on = False
out["iter_stats"] = stats_on
out["metrics"] = None
if want_metrics and stats_on and out["health"] == 200:
    if (out["lock"] or "").startswith("bench "):
        out["metrics"] = {"skipped": "a specfleet bench holds the lock (it reads /metrics)"}
    else:
        try:
            its = json.loads(get("/metrics", 10)[1] or b"[]")
            tokens = busy = drafted = accepted = with_draft = 0
            for it in its:
                ib, sd = it.get("inflightBatchingStats") or {}, it.get("specDecodingStats") or {}
                busy += float(it.get("iterLatencyMS") or 0)
                n_req = int(sd.get("numRequestsWithDraftTokens") or 0)
                drafted += int(sd.get("numDraftTokens") or 0); accepted += int(sd.get("numAcceptedTokens") or 0)
                with_draft += n_req
                tokens += int(ib.get("numContextRequests") or 0) + (int(sd.get("numAcceptedTokens") or 0) + n_req
                                                                    if n_req else int(ib.get("numGenRequests") or 0))
            out["metrics"] = {"iterations": len(its), "tokens": tokens, "busy_s": busy / 1000,
                              "tokens_per_s": tokens / (busy / 1000) if busy else None,
                              "acceptance_length": (accepted + with_draft) / with_draft if with_draft else None,
                              "acceptance_rate": accepted / drafted if drafted else None}
        except Exception as e:
            out["metrics"] = {"error": str(e)}
mem = {}
if shutil.which("nvidia-smi"):
    used = sh("nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits")
    vals = [int(x) for x in used.split() if x.isdigit()]
    if vals:
        mem = {"source": "nvidia-smi", "used_bytes": sum(vals) * 1048576}
try:
    info = {}
    with open("/proc/meminfo") as fh:
        for line in fh:
            k, _, v = line.partition(":")
            info[k] = int(v.split()[0]) * 1024
    mem.setdefault("source", "meminfo")
    mem.setdefault("used_bytes", info["MemTotal"] - info["MemAvailable"])
    mem["available_bytes"] = info["MemAvailable"]
except Exception:
    pass
out["memory"] = mem
d = data
while not os.path.isdir(d):
    d = os.path.dirname(d) or "/"
st = os.statvfs(d)
out["disk_free_bytes"] = st.f_bavail * st.f_frsize
print(json.dumps(out))
'''


class HostOverview(FactBase):
    """What `specfleet status` shows of a host, as one JSON object (one remote command)."""

    def command(self, data_dir: str, service: str, metrics: bool = False):
        return (f"python3 -c {shlex.quote(_PROBE)} {shlex.quote(data_dir)} {shlex.quote(service)} "
                f"{'1' if metrics else '0'}")

    def process(self, output):
        try:
            return json.loads("\n".join(output))
        except ValueError:
            return {"error": "\n".join(output)[-300:] or "no output"}


@deploy("Status (read only)")
def collect(out: dict, metrics: bool):
    s = current_plan().settings
    out[host.name] = host.get_fact(HostOverview, data_dir=s.data_dir, service=s.service_name, metrics=metrics)


def read_overviews(plans: dict[str, HostPlan], hosts: list[str], metrics: bool) -> dict[str, dict]:
    """Each reachable host's HostOverview (the unreachable ones are left out)."""
    found: dict = {}
    failed = runner.run_on(plans, hosts, collect, found, metrics)
    return {h: v for h, v in found.items() if h not in failed}


@deploy("Read the mirror's status")
def collect_mirror(found: dict):
    s = current_plan().settings
    found[host.name] = host.get_fact(MirrorStatus, cache_dir=s.mirror_cache_dir, python=s.mirror_python,
                                     files=(), dirs=())


def read_mirrors(plans: dict[str, HostPlan], mirrors: list[str]) -> dict[str, MirrorState]:
    """Each reachable mirror host's status (one read-only command each)."""
    found: dict[str, MirrorState] = {}
    runner.run_on(plans, mirrors, collect_mirror, found)
    return found


def ssh_argv(name: str, connection: dict, remote: str) -> list[str]:
    """ssh command line for a host from its inventory connection data (ssh_* vars, _sudo)."""
    if connection.get("ssh_password"):
        raise PlanError([f"{name}: ssh_password is set; `specfleet logs` uses ssh with keys only (or run journalctl on the host)"])
    argv = ["ssh", "-o", "BatchMode=yes"]
    if connection.get("ssh_port"):
        argv += ["-p", str(connection["ssh_port"])]
    if connection.get("ssh_key"):
        argv += ["-i", str(connection["ssh_key"])]
    if connection.get("ssh_known_hosts_file"):
        argv += ["-o", f"UserKnownHostsFile={connection['ssh_known_hosts_file']}"]
    if connection.get("ssh_strict_host_key_checking"):
        argv += ["-o", f"StrictHostKeyChecking={connection['ssh_strict_host_key_checking']}"]
    target = connection.get("ssh_hostname") or name
    if connection.get("ssh_user"):
        target = f"{connection['ssh_user']}@{target}"
    if connection.get("_sudo"):
        remote = f"sudo -n {remote}"
    return [*argv, target, remote]


def follow_journal(argv: list[str]) -> int:
    """Run the ssh command of `specfleet logs` until it ends or Ctrl-C: 0 when it succeeded or was stopped, else 1."""
    proc = subprocess.Popen(argv)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        rc = 0
    return 0 if rc == 0 else 1
