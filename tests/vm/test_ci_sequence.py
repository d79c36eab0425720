"""The CI sequence on the VM fleet (like Molecule): create -> prepare -> converge eagle3 -> idempotence
-> verify -> converge draft_target (with a fetch killed halfway on one guest) -> verify -> cleanup ->
verify stopped + cache kept -> destroy (the session fixture). Tests run in file order and share state."""

from __future__ import annotations

import json
import shlex
import threading
import time

import pytest

from specfleet import defaults
from specfleet.engines.catalog import ENGINES
from specfleet.host.layout import EARLYOOM_UNIT, Layout
from tests.vm import lab
from tests.vm.conftest import figure
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin

pytestmark = pytest.mark.vm

FILE_PATHS = ("/resolve/", "/encodings/")
STATE: dict = {}


def file_bytes(hub: HubStandin) -> int:
    return sum(n for path, n in hub.bytes_served().items() if any(p in path for p in FILE_PATHS))


def api_bytes(hub: HubStandin) -> int:
    return sum(n for path, n in hub.bytes_served().items() if path.startswith("/api/"))


def started_at(fleet) -> dict[str, str]:
    """When each host's serving container started: its current release's engine's container (service_name unset)."""
    out = {}
    for g in fleet.guests:
        engine = json.loads(lab.guest_release_json(g)).get("engine")
        assert engine in ENGINES, f"{g.name}: its current release names no engine ({engine!r})"
        unit = ENGINES[engine].unit
        out[g.name] = g.ssh(f"docker inspect --format '{{{{.State.StartedAt}}}}' {unit}").stdout.strip()
    return out


def test_converge_eagle3(vm_fleet, lab_inventory, hub):
    hub.reset_log()
    run = lab.run_pyinfra(lab_inventory, "eagle3", "-vv", json_out=False)
    assert run.returncode == 0, run.output()[-4000:]
    assert STANDIN_TOKEN not in run.output(), "the token must never appear in pyinfra output, even at -vv"
    STATE["first"] = run.seconds
    fetched = file_bytes(hub)
    repos = ["openai/gpt-oss-120b", "nvidia/gpt-oss-120b-Eagle3-long-context"]
    full = sum(HubStandin.repo_size(r) for r in repos) * len(vm_fleet.guests)
    STATE["first_bytes"] = fetched
    figure("first converge eagle3 (all guests)", f"{run.seconds:.1f} s")
    figure("bytes fetched by first converge / full repos", f"{fetched:,} / {full:,} = {fetched / full:.2f}")
    # gpt-oss: the original/ and metal/ copies were never requested
    assert not [p for p in hub.bytes_served() if "/original/" in p or "/metal/" in p]
    for g in vm_fleet.guests:
        answer = lab.guest_curl_completion(g)
        assert answer["choices"][0]["text"].strip()


def test_idempotence(vm_fleet, lab_inventory, hub):
    before = started_at(vm_fleet)
    hub.reset_log()
    run = lab.run_pyinfra(lab_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-4000:]
    assert run.changed == {}, f"second converge changed: {run.changed}"
    assert file_bytes(hub) == 0, f"second converge downloaded: {hub.bytes_served()}"
    assert started_at(vm_fleet) == before, "the container was restarted"
    figure("second converge eagle3 (no change)", f"{run.seconds:.1f} s")
    figure("second / first converge time", f"{run.seconds / STATE['first']:.2f}")
    figure("bytes fetched by second converge (files / Hub API metadata)", f"{file_bytes(hub)} / {api_bytes(hub):,}")
    # the no-op converge's controller CPU and the rest (remote work + network), against pyinfra's own
    # floor on the same hosts in the same run: `pyinfra inventory.py exec -- true`
    floor = lab.run_pyinfra(lab_inventory, "exec true", json_out=False)
    assert floor.returncode == 0, floor.output()[-2000:]
    figure("no-op converge: controller CPU / remote + network (wall - CPU)",
           f"{run.cpu:.1f} s / {run.seconds - run.cpu:.1f} s")
    figure("no-op converge wall / `pyinfra inventory.py exec -- true` wall",
           f"{run.seconds:.1f} s / {floor.seconds:.1f} s = {run.seconds / floor.seconds:.2f}x")


def test_verify_eagle3(lab_inventory):
    proc = lab.run_infra_suite(lab_inventory)
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


def test_converge_draft_target_with_a_fetch_killed_halfway(vm_fleet, lab_inventory, hub):
    """The target's fetch on one guest killed halfway: a mechanism, not a race. The Hub stand-in holds every GET of
    the target's second weights file (hub.hold) until released, so no guest's target fetch can finish; the killer
    kills the victim's fetch-model once one of its files is complete (ci46: killed before any, it kept nothing to
    resume), then releases the others.
    (It used to throttle the Hub and poll its byte count; on a loaded 2-core machine the fetch once ended first.)"""
    victim = vm_fleet.guests[0]
    hub.reset_log()
    repo = "nvidia/Llama-3.3-70B-Instruct-FP4"
    hub.hold(f"/{repo}/resolve/{HubStandin.commit(repo)}/model-00002-of-00002.safetensors")
    killed, done = threading.Event(), threading.Event()
    # the fetcher itself, anchored at its argv[0]: the `job start` command that launched it carries the same words
    # in its own command line, and lingers a moment after answering (a kill of that ended nothing: ci44, ci45)
    layout = Layout(defaults.data_dir)
    fetcher = f"^{layout.venv}/bin/python {layout.fetch_tool} --repo {repo}"
    snapshots = f"{layout.repo_dir(repo)}/snapshots"

    def kill_while_held():
        deadline = time.monotonic() + 900
        try:
            while time.monotonic() < deadline and not done.is_set():
                # halfway: a file of the target complete (its snapshot link made) while the held one is in flight
                proc = victim.ssh(f"n=$(find {shlex.quote(snapshots)} -type l 2>/dev/null | wc -l); [ \"$n\" -ge 1 ] && "
                                  f"pkill -9 -e -f {shlex.quote(fetcher)} && echo \"killed after $n file(s)\"",
                                  check=False)
                if "killed after" in proc.stdout:
                    killed.set()
                    print(f"killer on {victim.name}: {proc.stdout.strip()}")
                    return
                time.sleep(0.5)
        finally:
            hub.release()

    killer = threading.Thread(target=kill_while_held, daemon=True)
    killer.start()
    try:
        run = lab.run_pyinfra(lab_inventory, "draft_target")
    finally:
        done.set()  # the killer stops (a converge that ended without the victim's fetch killed fails below)
        hub.release()
    killer.join(timeout=30)
    assert killed.is_set(), "never caught a fetch in flight"
    assert run.returncode != 0 and run.failed == [victim.name], (run.failed, run.output()[-3000:])
    # the victim kept serving its old release: it failed before the switch
    assert "gpt-oss" in victim.ssh("cat /var/lib/specfleet/current/release.json").stdout
    # the others converged
    for g in vm_fleet.guests[1:]:
        assert "Llama-3.3-70B" in g.ssh("cat /var/lib/specfleet/current/release.json").stdout

    hub.reset_log()
    rerun = lab.run_pyinfra(lab_inventory, "draft_target")
    assert rerun.returncode == 0, rerun.output()[-4000:]
    assert set(rerun.changed) == {victim.name}, f"only the interrupted guest had work left: {rerun.changed}"
    resumed = file_bytes(hub)
    full = HubStandin.repo_size("nvidia/Llama-3.3-70B-Instruct-FP4") + HubStandin.repo_size("nvidia/Llama-3.1-8B-Instruct-FP4")
    figure("re-run after a killed fetch: bytes fetched / one guest's full repos", f"{resumed:,} / {full:,}")
    assert 0 < resumed < full


def test_verify_draft_target(lab_inventory):
    proc = lab.run_infra_suite(lab_inventory)
    assert proc.returncode == 0, proc.stdout[-5000:]


def test_cleanup_stops_and_keeps_the_cache(vm_fleet, lab_inventory, hub):
    run = lab.run_pyinfra(lab_inventory, "cleanup")
    assert run.returncode == 0, run.output()[-4000:]
    for g in vm_fleet.guests:
        state = g.ssh("systemctl is-active specfleet-trtllm; systemctl is-enabled specfleet-trtllm", check=False).stdout.split()
        assert state == ["inactive", "disabled"], state
        assert g.ssh("docker ps -aq --filter name=specfleet-trtllm").stdout.strip() == ""
        # earlyoom as the image has it (installed, disabled: the deploy enabled it, and its marker said so)
        eo = g.ssh(f"systemctl is-active {EARLYOOM_UNIT}; systemctl is-enabled {EARLYOOM_UNIT}; "
                   f"ls {Layout(defaults.data_dir).earlyoom_marker} {Layout(defaults.data_dir).earlyoom_dropin}",
                   check=False).stdout.split()
        assert eo == ["inactive", "disabled"], eo
        listing = g.ssh("/var/lib/specfleet/venv/bin/hf cache ls --cache-dir /var/lib/specfleet/hf/hub --format json").stdout
        cached = {entry["repo_id"] for entry in json.loads(listing)}
        assert {"nvidia/Llama-3.3-70B-Instruct-FP4", "openai/gpt-oss-120b"} <= cached, cached
    again = lab.run_pyinfra(lab_inventory, "cleanup")
    assert again.returncode == 0 and again.changed == {}
