"""Fault scenarios on the VM fleet: each injects one fault with a mechanism (a condition the test waits for on
the guest or the Hub stand-in, never a fixed sleep), then checks what the host serves afterwards.

Runs after the CI sequence (which ends with cleanup) and before the rollout scenarios; tests run in file
order and share STATE. The heaviest are marked `full` (tests/run.sh --full); CI runs the others. Every
scenario works on the first guest only (`--limit`), so the other guests keep their state for the rollout tests."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import yaml

from specfleet.host.layout import DOCKER_UNIT, main_pid
from tests.vm import lab
from tests.vm.conftest import figure
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin

pytestmark = pytest.mark.vm

DATA = "/var/lib/specfleet"
SLOW_TAG = f"{lab.STANDIN_REPO}:1.2.0rc6-slowload"
LLAMA = "nvidia/Llama-3.3-70B-Instruct-FP4"
STATE: dict = {}


def serving(guest) -> dict:
    """What the guest serves: current release, unit state, gate state, and a completion's text."""
    out = guest.ssh(f"basename $(readlink {DATA}/current); systemctl is-active specfleet-trtllm; "
                    f"cat {DATA}/gate.json 2>/dev/null || echo '{{}}'", check=False).stdout.split("\n")
    release = json.loads(lab.guest_release_json(guest)) if out[0] else {}
    model = release.get("served_model", "openai/gpt-oss-120b")
    try:
        text = lab.guest_curl_completion(guest, model=model)["choices"][0]["text"].strip()
    except Exception as exc:  # noqa: BLE001 - reported as "not serving"
        text = f"NOT SERVING: {exc}"[:200]
    return {"current": out[0], "active": out[1], "gate": json.loads(out[2] or "{}"), "profile": release.get("profile"),
            "text": text}


wait_for = lab.wait_for


def converge(inventory, deploy="eagle3", *extra, **kw):
    return lab.run_pyinfra(inventory, deploy, "--limit", "spark-1", *extra, **kw)


def test_baseline_serving(vm_fleet, lab_inventory):
    lab.make_variant_in_guests(vm_fleet, "ok", SLOW_TAG, load_delay_s=25)
    run = converge(lab_inventory)
    assert run.returncode == 0, run.output()[-3000:]
    st = serving(vm_fleet.guests[0])
    assert st["active"] == "active" and st["gate"].get("result") == "passed" and st["text"], st
    STATE["A"] = st["current"]


def test_ssh_connection_killed_mid_gate_host_finishes_on_its_own(vm_fleet, lab_inventory):
    """A new release whose server loads for 25 s; the controller's SSH session is killed while the gate waits
    for /health. The host job finishes the gate by itself; the next converge changes nothing."""
    guest = vm_fleet.guests[0]
    inv_b = lab.with_vars(lab_inventory, vm_fleet.workdir / "fault-b.yml", image=SLOW_TAG)
    proc = lab.start_pyinfra(inv_b, "eagle3", "--limit", "spark-1")
    wait_for("the gate to be running on the guest",
             lambda: '"result": "running"' in guest.ssh(f"cat {DATA}/gate.json", check=False).stdout
             and guest.ssh(f"basename $(readlink {DATA}/current)", check=False).stdout.strip() != STATE["A"])
    # kill every sshd session of the controller's user (this command's own session goes too: ignore its result)
    guest.ssh("pkill -KILL -f 'sshd: [a-z]*@notty' ; true", check=False)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode != 0, "the controller lost its session: its run cannot report success"
    st = wait_for("the host to finish the gate on its own",
                  lambda: (s := serving(guest))["gate"].get("result") in ("passed", "failed") and s, timeout=300)
    assert st["gate"]["result"] == "passed" and st["current"] != STATE["A"] and st["active"] == "active" and st["text"], st
    STATE["B"] = st["current"]
    rerun = converge(inv_b)
    assert rerun.returncode == 0 and rerun.changed == {}, (rerun.changed, rerun.output()[-2000:])
    assert serving(guest)["current"] == STATE["B"]


def test_gate_not_passed_is_not_converged(vm_fleet, lab_inventory):
    """gate.json says the current release never passed (an earlier run died before its gate): a converge gates it
    again (no restart: it is running) instead of reporting success unchecked."""
    guest = vm_fleet.guests[0]
    inv_b = vm_fleet.workdir / "fault-b.yml"
    started = guest.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()
    guest.ssh(f"""python3 -c "import json; p='{DATA}/gate.json'; d=json.load(open(p)); d['result']='running'; json.dump(d, open(p, 'w'))" """)
    run = converge(inv_b)
    assert run.returncode == 0, run.output()[-3000:]
    assert any("Activate release" in name and "gate not passed" in name for name in run.changed.get("spark-1", [])), run.changed
    st = serving(guest)
    assert st["gate"]["result"] == "passed" and st["current"] == STATE["B"] and st["text"]
    assert guest.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip() == started


@pytest.mark.full  # CI keeps the unit test of the same revert (test_failed_restart_reverts_like_a_failed_gate)
def test_docker_down_at_restart_reverts_to_the_previous_release(vm_fleet, lab_inventory):
    """Stage a new release, then take docker down so that it fails to start exactly once, then switch: the
    restart fails, the host switches back to the previous release (docker starts then) and gates it."""
    from specfleet.fleet.run import run_on
    from specfleet.plan import build_plans, load_inventory_or_fail
    from specfleet.steps import stage, switch

    guest = vm_fleet.guests[0]
    inv_c = lab.with_vars(lab_inventory, vm_fleet.workdir / "fault-c.yml", image=SLOW_TAG,
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 4}})
    env = {"SPECFLEET_INVENTORY": str(inv_c), "HF_TOKEN": STANDIN_TOKEN}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        plans = {h: p for h, p in build_plans(load_inventory_or_fail(), "eagle3").items() if h == "spark-1"}
        assert run_on(plans, ["spark-1"], stage) == set()
        lab.docker_fails_once(guest)
        failed = run_on(plans, ["spark-1"], switch)
    finally:
        for k, v in old_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        lab.docker_restored(guest)
    assert failed == {"spark-1"}
    assert guest.ssh(f"test -e {lab.FAULT_DOCKER}", check=False).returncode != 0, "docker failed to start once"
    st = serving(guest)
    assert st["current"] == STATE["B"] and st["active"] == "active" and st["text"], st
    assert st["gate"]["release"] == STATE["B"] and st["gate"]["result"] == "passed"
    assert "rolled back" in st["gate"].get("detail", ""), st["gate"]
    log = guest.ssh(f"cat $(ls -d {DATA}/jobs/*/ | tail -n 1)log").stdout
    assert "restart" in log and "reverting to previous release" in log, log[-2000:]


@pytest.mark.full  # CI keeps test_deploy_faults.py::test_a_running_job_with_the_same_key_is_attached_to_not_started_twice
def test_controller_killed_mid_fetch_rerun_attaches_to_the_running_job(vm_fleet, lab_inventory, hub):
    """SIGKILL the controller while a model fetch runs on the host: the fetch goes on; the re-run attaches to it
    (no second fetch job, no byte fetched twice) and finishes the converge. The Hub stand-in stays slow until
    the re-run says it attached (a condition, not a race)."""
    guest = vm_fleet.guests[0]
    guest.ssh(f"rm -rf {DATA}/hf/hub/models--nvidia--Llama-3.3-70B-Instruct-FP4 {DATA}/hf/hub/models--nvidia--Llama-3.1-8B-Instruct-FP4")
    jobs_before = set(guest.ssh(f"ls {DATA}/jobs", check=False).stdout.split())
    hub.reset_log()
    hub.set_throttle(48 * 1024)
    try:
        first = lab.start_pyinfra(lab_inventory, "draft_target", "--limit", "spark-1")
        wait_for("the fetch to be in flight", lambda: sum(
            n for p, n in hub.bytes_served().items() if LLAMA in p and p.endswith(".safetensors")) > 128 * 1024)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
        job = guest.ssh(f"j=$(cat {DATA}/jobs/active); echo $j; systemctl is-active specfleet-job-$j", check=False).stdout.split()
        assert job[-1] == "active", f"the host's fetch job must outlive the controller: {job}"
        rerun = lab.start_pyinfra(lab_inventory, "draft_target", "--limit", "spark-1")
        wait_for("the re-run to attach to the running fetch job", lambda: "attached to job" in rerun.output()
                 or rerun.proc.poll() is not None, timeout=600)
        hub.set_throttle(None)
        rerun.wait(timeout=900)
    finally:
        hub.set_throttle(None)
    assert rerun.returncode == 0, rerun.output()[-3000:]
    assert f"attached to job {job[0]}" in rerun.output(), rerun.output()[-3000:]
    new_jobs = sorted(set(guest.ssh(f"ls {DATA}/jobs").stdout.split()) - jobs_before - {"active"})
    keys = guest.ssh(" ; ".join(f"cat {DATA}/jobs/{j}/job.json" for j in new_jobs)).stdout
    assert keys.count(f"fetch:{LLAMA}@") == 1, f"one fetch job for the target in this test, not two: {new_jobs}"
    served = sum(n for p, n in hub.bytes_served().items() if LLAMA in p and "/resolve/" in p)
    full = HubStandin.repo_size(LLAMA)
    figure("controller SIGKILLed mid-fetch: target bytes served / repo bytes", f"{served:,} / {full:,} = {served / full:.2f}")
    assert served <= full
    st = serving(guest)
    assert st["profile"] == "draft_target" and st["gate"]["result"] == "passed" and st["text"], st


@pytest.mark.full
def test_disk_full_during_a_fetch_keeps_serving_and_rerun_completes(vm_fleet, lab_inventory, hub):
    guest = vm_fleet.guests[0]
    before = serving(guest)
    guest.ssh(f"rm -rf {DATA}/hf/hub/models--openai--gpt-oss-120b")
    hub.reset_log()
    hub.set_throttle(128 * 1024)
    try:
        proc = lab.start_pyinfra(lab_inventory, "eagle3", "--limit", "spark-1")
        wait_for("the fetch to be in flight", lambda: sum(
            n for p, n in hub.bytes_served().items() if "gpt-oss-120b/resolve" in p and p.endswith(".safetensors")) > 128 * 1024)
        # every free block, root's reserve included (the fetch runs as root); ext4 needs a few blocks of
        # its own for the filler's extents, so take the largest size that fits, then the crumbs left
        guest.ssh(f"f=$(( $(stat -f -c '%f * %S' {DATA}) )); for m in 262144 1048576 4194304 16777216; do "
                  f"fallocate -l $((f - m)) {DATA}/fault-filler 2>/dev/null && break; done; "
                  f"for i in $(seq 64); do fallocate -l 65536 {DATA}/fault-filler-$i 2>/dev/null || break; done; "
                  f"test -e {DATA}/fault-filler && df -B1 {DATA}")
        hub.set_throttle(None)
        out, err = proc.communicate(timeout=900)
    finally:
        hub.set_throttle(None)
        guest.ssh(f"rm -f {DATA}/fault-filler*", check=False)
    assert proc.returncode != 0, "a full disk fails the fetch"
    assert "No space left on device" in out + err or "ENOSPC" in out + err or "disk" in (out + err).lower(), (out + err)[-3000:]
    st = serving(guest)
    assert st["current"] == before["current"] and st["text"], "still serving its release"
    rerun = converge(lab_inventory)
    assert rerun.returncode == 0, rerun.output()[-3000:]
    st = serving(guest)
    assert st["profile"] == "eagle3" and st["gate"]["result"] == "passed" and st["text"], st


@pytest.mark.full
@pytest.mark.parametrize("status", [429, 500])
def test_hub_failing_for_a_while_is_retried(vm_fleet, lab_inventory, hub, status):
    guest = vm_fleet.guests[0]
    before = serving(guest)
    snap = guest.ssh(f"ls -d {DATA}/hf/hub/models--openai--gpt-oss-120b/snapshots/*/").stdout.strip()
    guest.ssh(f"rm -f \"$(readlink -f {snap}config.json)\" {snap}config.json")  # blob and link: a real download
    hub.reset_log()
    hub.fail_next(status, 5)
    run = converge(lab_inventory, json_out=False)
    assert run.returncode == 0, run.output()[-3000:]
    assert sum(1 for _, _, code in hub.requests() if code == status) == 5
    figure(f"Hub answering {status} for 5 requests: converge", f"{run.seconds:.1f} s, succeeded")
    assert guest.ssh(f"test -s {snap}config.json", check=False).returncode == 0
    st = serving(guest)
    assert st["current"] == before["current"] and st["text"]


@pytest.mark.full  # CI keeps the real lock step's refusal on @fake hosts (test_rollout_halt.py, the rollout's lock)
def test_two_converges_at_once_the_second_is_refused(vm_fleet, lab_inventory, hub):
    guest = vm_fleet.guests[0]
    snap = guest.ssh(f"ls -d {DATA}/hf/hub/models--openai--gpt-oss-120b/snapshots/*/").stdout.strip()
    shard = f"{snap}model-00001-of-00002.safetensors"
    guest.ssh(f"rm -f \"$(readlink -f {shard})\" {shard}")  # the blob too: the fetch must download it
    hub.set_throttle(8 * 1024)  # until the second converge has been refused
    try:
        first = lab.start_pyinfra(lab_inventory, "eagle3", "--limit", "spark-1")
        wait_for("the first converge to hold the lock", lambda: guest.ssh(f"cat {DATA}/lock/owner", check=False).stdout.strip())
        second = converge(lab_inventory, json_out=False)
        hub.set_throttle(None)
        out, err = first.communicate(timeout=900)
    finally:
        hub.set_throttle(None)
    assert second.returncode != 0 and "refused: another run holds the lock: converge" in second.output(), second.output()[-2000:]
    assert first.returncode == 0, (out + err)[-3000:]
    assert guest.ssh(f"test -e {DATA}/lock", check=False).returncode != 0, "lock released"
    st = serving(guest)
    assert st["gate"]["result"] == "passed" and st["text"]


@pytest.mark.parametrize("how", ["_sudo data", pytest.param("--sudo flag", marks=pytest.mark.full)])
def test_token_under_sudo_never_leaves_the_secrets_dir(vm_fleet, lab_inventory, how):
    """Converge as the operator `spark` through sudo with a new token: afterwards the token is found in exactly
    one file on the guest, /etc/specfleet/hf_token (root 0600)."""
    guest = vm_fleet.guests[0]
    token = f"hf_sudo_{how[:5].strip('_-')}_{int(time.time())}"
    inv = lab.with_vars(lab_inventory, vm_fleet.workdir / f"sudo-{how[:2]}.yml", ssh_user="spark", _sudo=True)
    if how == "--sudo flag":  # only pyinfra's flag asks for sudo (host data would win over it)
        doc = yaml.safe_load(inv.read_text())
        doc["all"]["vars"].pop("_sudo")
        inv.write_text(yaml.safe_dump(doc, sort_keys=False))
    extra = ("--sudo",) if how == "--sudo flag" else ()
    run = converge(inv, "eagle3", *extra, env={"HF_TOKEN": token}, json_out=False)
    assert run.returncode == 0, run.output()[-3000:]
    assert token not in run.output()
    # the token goes to grep on stdin: on grep's command line sudo would log it to the journal itself
    found = guest.ssh(f"grep -rlF -f - /etc /tmp /var/tmp /var/log /home /root /run {DATA} 2>/dev/null; true",
                      input=token.encode()).stdout.split()
    assert found == ["/etc/specfleet/hf_token"], found
    assert guest.ssh("stat -c '%U %G %a' /etc/specfleet/hf_token").stdout.split() == ["root", "root", "600"]
    # back to the lab's token, for the tests that follow
    restore = converge(lab_inventory)
    assert restore.returncode == 0, restore.output()[-2000:]
    assert serving(guest)["text"]


@pytest.mark.full
def test_guest_without_the_nvidia_toolkit_is_refused_and_keeps_serving(vm_fleet, lab_inventory):
    """The stand-in NVIDIA container toolkit taken off spark-1 (docker's `nvidia` runtime dropped from daemon.json,
    the prestart hook moved away): a converge is refused by the preflight with one line naming the host, nothing on
    the host changes and it keeps serving; then the toolkit is restored. docker is reloaded (SIGHUP re-reads
    `runtimes`; an empty object replaces them), not restarted: a restart would also restart the unit
    (Requires=docker.service), which `--gpus=all` cannot start without the hook, as on a real Spark."""
    guest = vm_fleet.guests[0]
    before = serving(guest)
    assert before["active"] == "active" and before["text"], before
    started = guest.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()

    def runtimes() -> str:
        return guest.ssh("docker info --format '{{json .Runtimes}}'", check=False).stdout

    reload_docker = f"kill -HUP $({main_pid(DOCKER_UNIT)})"
    assert '"nvidia"' in runtimes()
    guest.ssh("set -e; cp /etc/docker/daemon.json /root/daemon.json.standin; "
              "echo '{\"runtimes\": {}}' > /etc/docker/daemon.json; "
              "mv /usr/bin/nvidia-container-runtime-hook /root/nvidia-container-runtime-hook.standin; " + reload_docker)
    try:
        wait_for("docker to drop its nvidia runtime", lambda: '"nvidia"' not in runtimes(), timeout=60)
        run = converge(lab_inventory, json_out=False)
        out = run.output()
        assert run.returncode != 0, out[-3000:]
        assert "spark-1: preflight: gpus is true but docker has no nvidia runtime" in out, out[-3000:]
        st = serving(guest)
        assert st["current"] == before["current"] and st["active"] == "active" and st["text"], st
        assert guest.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip() == started
        assert guest.ssh(f"test -e {DATA}/lock", check=False).returncode != 0, "a refused host is not locked"
    finally:
        guest.ssh("mv -f /root/daemon.json.standin /etc/docker/daemon.json; "
                  "mv -f /root/nvidia-container-runtime-hook.standin /usr/bin/nvidia-container-runtime-hook; "
                  + reload_docker, check=False)
    wait_for("docker to have the nvidia runtime again", lambda: '"nvidia"' in runtimes(), timeout=60)
    figure("converge refused on a guest without the NVIDIA toolkit", f"{run.seconds:.1f} s")
    rerun = converge(lab_inventory)
    assert rerun.returncode == 0 and rerun.changed == {}, (rerun.changed, rerun.output()[-2000:])
    assert serving(guest)["current"] == before["current"]
