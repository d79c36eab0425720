#!/usr/bin/env python3
"""specfleet-host: the on-host half of specfleet (installed by the deploy as <data_dir>/bin/specfleet-host).

Runs with the host's system python3 (stdlib only); plain lines for the operator, one clear line on failure.

  activate ID [--revert] [--rollback] [--timeout S] [--prune N]
                     make release ID current and prove it serves: refs/main, unit (daemon-reload only if
                     it changed), `current` link, enable; restart unless the unit already serves ID (a pair's
                     head switches its worker first: pair_switch.py); then
                     the readiness gate (/health 200 within the release's timeout, then a non-empty smoke
                     completion). With --revert, a failed restart or gate switches back to `previous`, gates
                     that, and still exits 1. The outcome is in <data_dir>/gate.json. --prune N: once passed.
                     --rollback (the rollback deploy's): a head back from its pair's release asks its worker to
                     serve alone again (pair_switch.after_rollback). One switch of a host at a time (a lock).
  activate ID --pair-worker | leave-pair ID
                     a pair worker's side of its head's switch, or of the revert of a failed first pair release ID
                     (serve alone again), run by its pair gate (pair_switch.py); one JSON line.
  gate               re-run the readiness gate of the current release (no restart, no revert).
  stage ID --bundle B64  write release ID's files from one bundle (release_stage.py): a new one appears whole.
  job start KEY [--env K=V]... -- ARGV...
                     run ARGV detached from the SSH session as a transient systemd unit
                     (specfleet-job-<id>), with a log and a progress file under <data_dir>/jobs/<id>/.
                     One job at a time: if a job with the same KEY is running, attach to it (prints its
                     id); if another job runs, print busy. Prints one JSON line.
  job status ID [--wait S]  JSON: state (running|ok|failed|lost), exit code, progress, message, log tail;
                     with --wait, after up to S seconds while the job runs (at once when it ends).
  status             JSON: current, previous, releases (newest first), unit state, gate, active job.
  prune --keep N     delete releases beyond the N newest (never current/previous), then what no kept one uses:
                     models, and the images specfleet tagged that no kept release runs (docker_images.py).
  unlock [ID] [--force]  release the run lock (<data_dir>/lock) held by run ID (or by anyone with --force).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its modules (layout.MODULES) are installed next to it
import docker_images  # noqa: E402
import drain  # noqa: E402
import host_jobs  # noqa: E402
import pair_switch  # noqa: E402
import readiness  # noqa: E402
import release_stage  # noqa: E402
import release_state  # noqa: E402
from hostlib import Fail, Progress, atomic_write, now_iso, poll_until, prune_unused, read_json, say, sh  # noqa: E402
from layout import (  # noqa: E402
    CONFIG_FILE,
    DRAFT_LINK,
    PAIR_LEAVE_CMD,
    PAIR_WORKER_FLAG,
    RECORD_FILE,
    SMOKE_FILE,
    UNIT_DIR,
    Layout,
    cache_folder,
)


class Host:
    def __init__(self, data_dir: str, unit_dir: str = UNIT_DIR):
        self.layout = lay = Layout(data_dir)
        self.data = Path(data_dir)
        self.unit_dir = Path(unit_dir)
        self.releases = Path(lay.releases)
        self.current_link = Path(lay.current)
        self.previous_file = Path(lay.previous)
        self.gate_file = Path(lay.gate_file)
        self.jobs = host_jobs.Jobs(lay, os.path.abspath(__file__))
        self.hub = Path(lay.hub_cache)
        self.drafts = Path(lay.drafts)
        self.lock_dir, self.lock_file = Path(lay.lock), Path(lay.lock_owner)
        self.progress = Progress()

    # ---- releases ------------------------------------------------------------------------------
    def record(self, rid: str) -> dict:
        path = self.releases / rid / RECORD_FILE
        if not path.exists():
            raise Fail(f"release {rid} not found on this host ({path} missing)")
        record = read_json(path)
        if record is None:  # e.g. cut short by a power loss right after it was written
            raise Fail(f"release {rid} is damaged ({path} is not valid JSON); the next converge rewrites it")
        return record

    def current(self) -> str | None:
        return release_state.current(self.layout)

    def previous(self) -> str | None:
        rid = release_state.previous(self.layout)
        return rid if rid and (self.releases / rid / RECORD_FILE).exists() else None

    def all_records(self) -> list[dict]:
        return release_state.records(self.layout)

    def gate_state(self) -> dict:
        return release_state.gate(self.layout)

    def set_gate(self, rid: str, result: str, **fields) -> None:
        """A passed gate records the start marker it saw: the gateway agent keeps a container started since out."""
        if result == "passed":
            fields["started"] = release_state.started(self.layout)
        atomic_write(self.gate_file, json.dumps({"release": rid, "result": result, "at": now_iso(), **fields}) + "\n")

    # ---- activate: switch (if needed) + gate + revert ----------------------------------------------
    def check_complete(self, rec: dict) -> None:
        rdir = self.releases / rec["id"]
        for name in (rec.get("options_file", CONFIG_FILE), SMOKE_FILE, f"{rec['service']}.service"):
            if not (rdir / name).is_file():
                raise Fail(f"release {rec['id']} is incomplete: {name} missing")
        target = rec["models"]["target"]
        snap = self.hub / cache_folder(target["repo"]) / "snapshots" / target["commit"]
        if not snap.is_dir():
            raise Fail(f"release {rec['id']} needs {target['repo']}@{target['commit'][:12]}, not in the cache")
        if "draft" in rec["models"] and not (rdir / DRAFT_LINK).is_dir():
            raise Fail(f"release {rec['id']} is incomplete: its draft model dir is missing")

    def serving_unit(self) -> str | None:
        """The unit of the release that is current (None: none is): what serves until a switch stops it."""
        cur = self.current()
        try:
            return self.record(cur)["service"] if cur and (self.releases / cur / RECORD_FILE).exists() else None
        except Fail:  # a damaged record: its unit is unknown (the switch then restarts only the new release's)
            return None

    def install(self, rec: dict) -> None:
        """Point refs, unit and `current` at the release. A release of another unit (another engine's, or another
        service_name) stops and disables the one that served, so that only one server holds the port."""
        rid, service = rec["id"], rec["service"]
        old, old_unit = self.current(), self.serving_unit()
        if old and old != rid:
            atomic_write(self.previous_file, old + "\n")
        if old_unit and old_unit != service:
            sh("systemctl", "disable", "--now", f"{old_unit}.service", check=False)
            sh("docker", "rm", "-f", old_unit, check=False)
            say(f"{old_unit} stopped and disabled: {rid} runs as {service}")
        for model in rec["models"].values():
            ref = self.hub / cache_folder(model["repo"]) / "refs" / "main"
            if atomic_write(ref, model["commit"]):
                say(f"refs/main of {model['repo']} -> {model['commit'][:12]}")
        unit_dst = self.unit_dir / f"{service}.service"
        unit_changed = atomic_write(unit_dst, (self.releases / rid / f"{service}.service").read_text())
        if unit_changed:
            sh("systemctl", "daemon-reload")
            say(f"{unit_dst} changed: daemon-reload")
        if old != rid:
            tmp = self.data / ".current.tmp"
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            os.symlink(f"releases/{rid}", tmp)
            os.replace(tmp, self.current_link)
        if sh("systemctl", "is-enabled", service, check=False).stdout.strip() != "enabled":
            sh("systemctl", "enable", f"{service}.service")
            say(f"{service} enabled at boot")

    def restart_needed(self, rec: dict) -> bool:
        """Whether activating `rec` (re)starts the server: another release, another unit, or not running."""
        service = rec["service"]
        unit_dst = self.unit_dir / f"{service}.service"
        unit_new = (self.releases / rec["id"] / f"{service}.service").read_text()
        running = (sh("systemctl", "is-active", service, check=False).stdout.strip() == "active"
                   and sh("docker", "inspect", "--format", "{{.State.Running}}", service,
                          check=False).stdout.strip() == "true")
        return self.current() != rec["id"] or not unit_dst.is_file() or unit_dst.read_text() != unit_new or not running

    def _start(self, rec: dict) -> None:
        sh("systemctl", "reset-failed", f"{rec['service']}.service", check=False)
        sh("systemctl", "restart", f"{rec['service']}.service")

    def _restart(self, rec: dict) -> None:
        """(Re)start the release's server; a pair's head stops its launch, switches its worker, then starts it."""
        if pair_switch.role(rec) == "head":
            sh("systemctl", "stop", f"{rec['service']}.service")
            pair_switch.switch_worker(self.layout, rec)
        self._start(rec)

    def activate(self, rid: str, revert: bool, timeout: int | None = None, skip_gateways: tuple = (),
                 rollback: bool = False) -> None:
        """Switch to release `rid` and gate it (one switch of this host at a time: a pair head's `leave-pair` ask,
        which switches it too, waits for it or it for that); `rollback`: the rollback deploy's (after_rollback)."""
        with pair_switch.one_switch_at_a_time(self.layout):
            self.activate_unlocked(rid, revert, timeout, skip_gateways, rollback)

    def activate_unlocked(self, rid: str, revert: bool, timeout: int | None, skip_gateways: tuple,
                          rollback: bool) -> None:
        rec = self.record(rid)
        if pair_switch.role(rec) == "worker":
            raise Fail(f"release {rid} is a pair worker's: its head's switch activates it ({PAIR_WORKER_FLAG})")
        self.check_complete(rec)
        old, before = self.current(), self.gate_state()
        restart = self.restart_needed(rec)
        since = time.time()
        self.set_gate(rid, "running")  # from here the readiness agent tells the gateways `down`
        # behind gateways and serving: out of every gateway's pool, requests in flight done (drain.py)
        serving = self.serving_unit() or rec["service"]  # what the switch stops: the current release's unit
        refused = restart and sh("systemctl", "is-active", serving, check=False).stdout.strip() == "active" \
            and drain.before_restart(self.layout, since, skip_gateways, say, self.progress)
        if refused:
            atomic_write(self.gate_file, json.dumps(before) + "\n")  # nothing changed: the old gate holds again
            raise Fail(f"{refused}; not restarting (it serves {old or 'nothing'} as before)")
        restarted_at = None
        try:
            self.install(rec)
            if restart:
                self.progress(kind="gate", release=rid, phase="restart", elapsed=0,
                              timeout=timeout or rec["gate"]["health_timeout_sec"], unit="restarting")
                restarted_at = time.time()
                self._restart(rec)
                say(f"switched {old or '(none)'} -> {rid}; restarted {rec['service']}")
                image_id = sh("docker", "image", "inspect", "--format", "{{.Id}}", rec["image"],
                              check=False).stdout.strip()
                if image_id:
                    atomic_write(self.releases / rid / "image-id", image_id + "\n")
            elif pair_switch.role(rec) == "head" and pair_switch.switch_worker(self.layout, rec):
                # the worker's container was down (its rank with it, so the launch had ended: nothing to drain) or
                # not its release: it started again, and the launch starts again with it
                restarted_at = time.time()
                self._start(rec)
            else:
                say(f"{rid} is already serving; gating it again")
            elapsed, text = self._gate_once(rec, timeout)
        except Fail as exc:
            self._failed(rec, exc, revert, timeout)
            return
        downtime = round(time.time() - restarted_at, 2) if restarted_at else None
        self.set_gate(rid, "passed", downtime_s=downtime, **readiness.memory(self.layout, since))
        say(f"{rid} ready after {elapsed:.1f}s; smoke completion returned {len(text)} characters")
        if rollback and old and old != rid:  # from a pair's release back to the head's own: the worker leaves too
            pair_switch.after_rollback(self, old, rec)

    def _failed(self, rec: dict, exc: Fail, revert: bool, timeout: int | None) -> None:
        rid = rec["id"]
        self.set_gate(rid, "failed", detail=str(exc))
        say(f"readiness gate FAILED for {rid}: {exc}", f"last journal lines of {rec['service']}:",
            readiness.journal_tail(rec["service"]), err=True)
        prev = self.previous()
        if not (revert and prev and prev != rid):
            raise Fail(f"{rid} failed its readiness gate: {exc}")
        say(f"reverting to previous release {prev}", err=True)
        alone = False  # the pair's first release: the worker serves alone again too, once the head does
        try:
            prev_rec = self.record(prev)
            self.check_complete(prev_rec)
            self.set_gate(prev, "running")
            alone = pair_switch.leaves_pair(rec, prev_rec)
            self.install(prev_rec)
            self._restart(prev_rec)
            self._gate_once(prev_rec, timeout)
        except Fail as exc2:
            self.set_gate(prev, "failed", detail=str(exc2))
            worker = pair_switch.leave_note(self.layout, rec) if alone else ""
            raise Fail(f"{rid} failed its readiness gate ({exc}); rollback to {prev} ALSO failed: {exc2}{worker}") \
                from None
        self.set_gate(prev, "passed", detail=f"rolled back: {rid} failed its gate")
        self.previous_file.unlink(missing_ok=True)  # the failed release must not be "previous" of the restored one
        worker = pair_switch.leave_note(self.layout, rec) if alone else ""
        raise Fail(f"{rid} failed its readiness gate ({exc}); rolled back to {prev}, which is serving{worker}")

    def gate(self) -> None:
        rid = self.current()
        if rid is None:
            raise Fail("no current release to gate")
        rec = self.record(rid)
        self.set_gate(rid, "running")
        try:
            elapsed, _ = self._gate_once(rec, None)
        except Fail as exc:
            self.set_gate(rid, "failed", detail=str(exc))
            raise
        self.set_gate(rid, "passed")
        say(f"{rid} ready after {elapsed:.1f}s")

    def _gate_once(self, rec: dict, timeout: int | None) -> tuple[float, str]:
        return readiness.gate_once(rec, self.releases / rec["id"], timeout, self.progress)

    # ---- status / prune / lock ------------------------------------------------------------------
    def status(self) -> dict:
        cur, service = self.current(), self.serving_unit()
        started = None
        if service:
            started = (sh("docker", "inspect", "--format", "{{.State.StartedAt}}", service, check=False).stdout.strip()
                       or None)
        return {
            "current": cur, "previous": self.previous(),
            "releases": self.all_records(),
            "active": sh("systemctl", "is-active", service, check=False).stdout.strip() if service else None,
            "container_started_at": started,
            "lock": self.lock_owner(),
            "gate": self.gate_state(),
            "job": self.jobs.active(),
        }

    def prune(self, keep: int) -> None:
        """Delete releases beyond the `keep` newest (never current/previous), then what no kept release uses."""
        records, protect = self.all_records(), {self.current(), self.previous()}
        kept = [r for r in records if r["id"] in protect]
        kept += [r for r in records if r not in kept][:max(keep - len(kept), 0)]
        kept_ids = {r["id"] for r in kept}
        for r in records:
            if r["id"] not in kept_ids:
                shutil.rmtree(self.releases / r["id"], ignore_errors=True)
                say(f"pruned release {r['id']}")
        prune_unused(self.hub, self.drafts, {(m["repo"], m["commit"]) for r in kept for m in r["models"].values()})
        self.prune_images(kept)

    def prune_images(self, kept: list[dict]) -> None:
        """Remove the images specfleet tagged that no kept release runs (by its tag, or the image id it recorded at
        its start): the docker root does not grow with every new image, and a rollback still finds its image."""
        refs = {r["image"] for r in kept if r.get("image")}
        refs |= {text.strip() for r in kept if (text := _read(self.releases / r["id"] / "image-id"))}
        try:
            docker_images.remove_unused(refs, say)
        except OSError as exc:
            say(f"warning: unused images not removed (docker: {exc}); the next prune tries again", err=True)

    def lock_owner(self) -> str | None:
        return release_state.lock_owner(self.layout)

    def unlock(self, run_id: str | None, force: bool) -> None:
        holder = self.lock_owner()
        if holder is None:
            say("no lock held")
            return
        parts = holder.split()
        held_by = parts[1] if len(parts) > 1 else ""
        if not force and run_id != held_by:
            raise Fail(f"not unlocking: held by {holder} (pass its id {held_by}, or --force)")
        shutil.rmtree(self.lock_dir, ignore_errors=True)
        say(f"released the lock held by {holder}")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="specfleet-host", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parent.parent))
    sub = ap.add_subparsers(dest="cmd", required=True)
    act = sub.add_parser("activate")
    act.add_argument("release")
    act.add_argument("--revert", action="store_true")
    act.add_argument("--rollback", action="store_true", help="the rollback deploy's switch (a pair's worker leaves)")
    act.add_argument(PAIR_WORKER_FLAG, action="store_true", help="a pair worker's side of its head's switch")
    act.add_argument("--timeout", type=int, help="override the release's health_timeout_sec")
    act.add_argument("--prune", type=int, metavar="N", help="once the gate passed: prune --keep N")
    act.add_argument("--skip-gateway", action="append", default=[], metavar="ADDRESS",
                     help="a gateway (its address) the drain does not wait for: it is down (rollout --without-gateway)")
    sub.add_parser(PAIR_LEAVE_CMD, help="a pair worker: serve alone again").add_argument("release")
    sub.add_parser("gate")
    (stage := sub.add_parser("stage")).add_argument("release")
    stage.add_argument("--bundle", required=True, help="the release's files (layout.Layout.stage_argv)")
    job = sub.add_parser("job").add_subparsers(dest="job_cmd", required=True)
    start = job.add_parser("start")
    start.add_argument("key")
    start.add_argument("--env", action="append", default=[], metavar="K=V")
    start.add_argument("argv", nargs=argparse.REMAINDER)
    (status := job.add_parser("status")).add_argument("id")
    status.add_argument("--wait", type=float, default=0.0, metavar="SECONDS")
    job.add_parser("run").add_argument("id")
    sub.add_parser("status")
    sub.add_parser("prune").add_argument("--keep", type=int, required=True)
    un = sub.add_parser("unlock")
    un.add_argument("id", nargs="?")
    un.add_argument("--force", action="store_true")
    return ap


def job_argv(args: argparse.Namespace) -> list[str]:
    """The command of `job start KEY -- ARGV...` (argparse keeps or drops the `--` depending on the version)."""
    return args.argv[1:] if args.argv[:1] == ["--"] else list(args.argv)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host = Host(args.data_dir)
    try:
        if args.cmd == "activate" and args.pair_worker:
            print(json.dumps(pair_switch.hold(host, args.release)))
        elif args.cmd == "activate":
            host.activate(args.release, args.revert, args.timeout, tuple(args.skip_gateway), args.rollback)
            if args.prune:
                pair_switch.prune_quietly(host, args.prune)
        elif args.cmd == PAIR_LEAVE_CMD:
            print(json.dumps(pair_switch.leave(host, args.release)))
        elif args.cmd == "gate":
            host.gate()
        elif args.cmd == "stage":
            say(f"staged {args.release}: " + (", ".join(release_stage.stage(host.layout, args.release, args.bundle))
                                              or "nothing to write"))
        elif args.cmd == "job" and args.job_cmd == "start":
            command = job_argv(args)
            if not command:
                raise Fail("job start: nothing to run (KEY -- ARGV...)")
            env = dict(item.split("=", 1) for item in args.env if "=" in item)
            print(json.dumps(host.jobs.start(args.key, command, env)))
        elif args.cmd == "job" and args.job_cmd == "status":
            print(json.dumps(poll_until(lambda: host.jobs.status(args.id), lambda st: st["state"] != "running",
                                        min(max(args.wait, 0.0), 60.0))))
        elif args.cmd == "job" and args.job_cmd == "run":
            return host.jobs.run(args.id)
        elif args.cmd == "status":
            print(json.dumps(host.status(), indent=1))
        elif args.cmd == "prune":
            host.prune(args.keep)
        elif args.cmd == "unlock":
            host.unlock(args.id, args.force)
    except Fail as exc:
        say(f"specfleet-host: {exc}", err=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
