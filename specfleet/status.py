"""`specfleet status` (one row per host from ONE read-only remote command per host, run through pyinfra's API)
and `specfleet logs HOST [-f] [-n N]` (the unit's journal over SSH with the inventory's connection data).

/metrics drains: trtllm-serve removes the iteration stats it returns. So `status` reads /metrics only with
`--metrics`, and even then not on a host whose run lock is held by a `specfleet bench` (its load client is
collecting those stats); the figures then cover the iterations since the previous reader, not since start."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import click
from pyinfra import host
from pyinfra.api import FactBase, deploy

from .plan import EXIT_INVALID, PlanError, fleet_plans

EXIT_OK, EXIT_UNHEALTHY = 0, 1

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
    from .steps._common import current_plan

    s = current_plan().settings
    out[host.name] = host.get_fact(HostOverview, data_dir=s.data_dir, service=s.service_name, metrics=metrics)


def healthy(info: dict | None) -> tuple[bool, str]:
    """(healthy, why not): reachable, a current release, unit active, /health 200, its gate passed."""
    if not info:
        return False, "unreachable"
    if info.get("error"):
        return False, f"status not read: {info['error']}"
    gate = info.get("gate") or {}
    for bad, why in ((not info.get("release"), "no release"), (info.get("unit") != "active", f"unit {info.get('unit')}"),
                     (info.get("health") != 200, f"/health {info.get('health')}"),
                     (gate.get("release") != info.get("release") or gate.get("result") != "passed",
                      f"gate {gate.get('result') or 'never run'}" + ("" if gate.get("release") in (None, info.get("release"))
                                                                     else f" (for {gate.get('release')})"))):
        if bad:
            return False, why
    return True, "ok"


def _gb(x):
    return "-" if x is None else f"{x / 1e9:.1f}G"


def _dur(s):
    if s is None:
        return "-"
    d, rest = divmod(int(s), 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    return f"{d}d{h:02d}h" if d else f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def rows(hosts: list[str], found: dict[str, dict]) -> list[dict]:
    out = []
    for h in hosts:
        info = found.get(h) or {}
        ok, why = healthy(found.get(h))
        m = info.get("metrics") or {}
        gate = info.get("gate") or {}
        out.append({"host": h, "reachable": bool(found.get(h)) and not info.get("error"), "healthy": ok, "problem": None if ok else why,
                    "release": info.get("release"), "profile": info.get("profile"), "unit": info.get("unit"),
                    "health": info.get("health"), "gate": gate.get("result"), "gate_release": gate.get("release"),
                    "gate_at": gate.get("at"), "uptime_s": info.get("uptime_s"), "iter_stats": info.get("iter_stats"),
                    "metrics": info.get("metrics"), "tokens_per_s": m.get("tokens_per_s"),
                    "acceptance_length": m.get("acceptance_length"), "acceptance_rate": m.get("acceptance_rate"),
                    "memory": info.get("memory"), "disk_free_bytes": info.get("disk_free_bytes"), "lock": info.get("lock"),
                    "image": info.get("image")})
    return out


def table(rs: list[dict]) -> list[str]:
    head = ("host", "state", "release", "profile", "unit", "health", "gate", "gate at", "uptime", "tok/s", "acc.len",
            "mem used", "disk free")
    lines = [head]
    for r in rs:
        mem = r["memory"] or {}
        used = _gb(mem.get("used_bytes")) + (" gpu" if mem.get("source") == "nvidia-smi" else "") if mem else "-"
        lines.append((r["host"], "ok" if r["healthy"] else f"BAD: {r['problem']}", r["release"] or "-", r["profile"] or "-",
                      r["unit"] or "-", str(r["health"] if r["health"] is not None else "-"), r["gate"] or "-",
                      r["gate_at"] or "-", _dur(r["uptime_s"]),
                      f"{r['tokens_per_s']:.1f}" if r["tokens_per_s"] else "-",
                      f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-", used, _gb(r["disk_free_bytes"])))
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in lines]


@click.command()
@click.argument("inventory_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--limit", default=None, help="Hosts or groups (comma-separated, globs allowed), as in pyinfra.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (one object per host) instead of the table.")
@click.option("--metrics", is_flag=True, help="Also read /metrics (tokens/s, acceptance) where the release enables "
                                              "iteration stats. It DRAINS trtllm-serve's queue; skipped on hosts a bench holds.")
def status(inventory_file: str, limit: str | None, as_json: bool, metrics: bool) -> None:
    """One row per host: release, profile, unit, /health, last gate, uptime, memory in use, disk free
    (and with --metrics tokens/s and acceptance). Read-only: one command per host.

    Exit 0: every host healthy; 1: a host is unreachable or unhealthy; 2: invalid input."""
    from .rollout import run_on, select

    try:
        inventory, plans = fleet_plans(inventory_file)
        hosts = select(inventory.hosts, inventory.groups, limit)
        if not hosts:
            raise PlanError([f"--limit {limit}: matches no host of the inventory"])
    except PlanError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)
    found: dict = {}
    failed = run_on(plans, hosts, collect, found, metrics)
    found = {h: v for h, v in found.items() if h not in failed}
    rs = rows(hosts, found)
    if as_json:
        click.echo(json.dumps(rs, indent=1))
    else:
        click.echo("\n".join(table(rs)))
        if not metrics:
            click.echo("(tok/s and acceptance: pass --metrics; reading /metrics drains trtllm-serve's iteration stats)")
    sys.exit(EXIT_OK if all(r["healthy"] for r in rs) else EXIT_UNHEALTHY)


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


@click.command()
@click.argument("host_name", metavar="HOST")
@click.option("--inventory", "inventory_file", default="inventory.py", show_default=True,
              type=click.Path(dir_okay=False), help="The project's inventory.py.")
@click.option("-f", "--follow", is_flag=True, help="Follow the journal until Ctrl-C.")
@click.option("-n", "--lines", type=click.IntRange(0, 1_000_000), default=100, show_default=True)
def logs(host_name: str, inventory_file: str, follow: bool, lines: int) -> None:
    """Print (or follow) the serving unit's journal on HOST (journalctl -u <service_name>) over SSH."""
    try:
        inventory, plans = fleet_plans(inventory_file)
        if host_name not in plans:
            raise PlanError([f"{host_name}: not in the inventory (hosts: {', '.join(plans)})"])
        plan = plans[host_name]
        remote = (f"journalctl -u {shlex.quote(plan.settings.service_name)} -n {lines} --no-pager"
                  + (" -f" if follow else ""))
        argv = ssh_argv(host_name, plan.connection, remote)
    except PlanError as exc:
        for line in exc.lines:
            click.echo(line, err=True)
        sys.exit(EXIT_INVALID)
    proc = subprocess.Popen(argv)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        rc = 0
    sys.exit(0 if rc == 0 else 1)
