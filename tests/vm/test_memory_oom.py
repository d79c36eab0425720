"""When memory runs out, the serving container dies, never the box. A VM cannot reproduce a GB10's
driver freeze; it proves the part specfleet controls: which process the kernel kills (the container's cgroup is capped
at MemTotal less memory_reserve_gb, and it runs with --oom-score-adj=1000), that SSH answers throughout and sshd and dockerd live on, that the failure is reported, and
that the host serves its release again. The trtllm-serve stand-in's modes oom_load (allocate without bound while
loading) and oom_request (on a long prompt) exhaust the guest's 2 GiB. Case (c): memory taken outside the container
(the stand-in for a GB10's GPU allocations, which its cap does not see) is met by earlyoom, which ends the container.
Case (d): vLLM refuses at start-up a memory share above what is free (the vLLM stand-in's check), and the host serves
its TensorRT-LLM release again. One guest of its own, the session fleet paused meanwhile: --full."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest

from specfleet import defaults
from specfleet.engines.catalog import TRTLLM, VLLM
from specfleet.host.layout import DOCKER_UNIT, EARLYOOM_UNIT, SSH_UNIT, Layout, main_pid
from specfleet.serving.render import OOM_SCORE_ADJ
from tests.vm import lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.conftest import cache_dir, figure, own_guests
from tests.vm.trtllm_standin.trtllm_serve import DEVICE_MEMORY, OOM_PROMPT_TOKENS

pytestmark = [pytest.mark.vm, pytest.mark.full, pytest.mark.kernel("oom-kill")]

DEPLOY = "eagle3"
SERVICE = TRTLLM.unit  # the serving unit (service_name unset)
GATE_FILE = Layout(defaults.data_dir).gate_file
STATE: dict = {}
TAGS = {mode: f"{lab.STANDIN_REPO}:1.2.0rc6-{mode.replace('_', '-')}" for mode in ("oom_load", "oom_request")}


@pytest.fixture(scope="module")
def spark(tmp_path_factory, request, standins):
    hub, wheelhouse = standins.hub, standins.wheelhouse
    """One guest serving release A (the stand-in in its normal mode), its two OOM variants loaded beside it."""
    fleet = own_guests(tmp_path_factory, request, "memory", "memory: boot 1 guest", count=1)
    t0 = time.monotonic()
    n_cas = lab.trust_controller_cas(fleet)
    mirrored = [g for g in fleet.guests if wheelhouse and wheelhouse_mod.guest_arch(g) in wheelhouse.arches]
    index_url = wheelhouse.index_url_for(fleet.controller_address) if wheelhouse else None
    lab.configure_guest_pip(fleet, index_url, cert=n_cas > 0, guests=mirrored)
    lab.load_standin_image(fleet, cache_dir())
    for mode, tag in TAGS.items():
        lab.make_variant_in_guests(fleet, mode, tag)
    inventory = lab.write_ci_inventory(fleet, hub.port, fleet.workdir / "ci-inventory.yml")
    run = lab.run_pyinfra(inventory, DEPLOY)
    assert run.returncode == 0, run.output()[-4000:]
    figure("memory: prepare + first converge of release A", f"{time.monotonic() - t0:.1f} s")
    guest = fleet.guests[0]
    STATE["A"], STATE["fleet"] = json.loads(lab.guest_release_json(guest))["id"], fleet
    return guest, inventory


def daemons(guest) -> dict[str, str]:
    """The sshd listener's and dockerd's PIDs (ssh.service's and docker.service's main processes) with their start
    times (/proc/PID/stat field 22): unchanged means never killed (sessions are sshd children that come and go)."""
    out = guest.ssh(f"for u in {SSH_UNIT} {DOCKER_UNIT}; do p=$({main_pid('$u')}); "
                    "echo \"$(cat /proc/$p/comm) $p $(cut -d' ' -f22 /proc/$p/stat)\"; done").stdout
    found = {f"{name} {pid}": start for name, pid, start in (line.split() for line in out.splitlines())}
    assert len(found) == 2, f"expected the sshd listener and dockerd: {out!r}"  # never a vacuous comparison
    return found


class SshPoller:
    """SSH to the guest every 2 s, each answer bounded (BOUND_SEC), from a thread, until stopped: the misses and the
    longest wait. A box that froze, or lost sshd, would miss. Before the container's cap, the guest's 2 GiB ran out as
    a whole and reclaim evicted the file pages of ssh's login (sshd, PAM, sudo), which TCG read back slowly: one login
    per case took over 20 s, then over 60 s (vm4, vm6). With the cap the kernel reclaims and kills inside the
    container's cgroup: the longest login took 6.7 s (vm7). The bound is 30 s: room for a loaded machine, well under
    what the thrashing took."""

    BOUND_SEC = 30

    def __init__(self, guest):
        self.guest, self.misses, self.longest, self.polls = guest, [], 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                ok = self.guest.ssh("true", check=False, timeout=self.BOUND_SEC).returncode == 0
            except Exception as e:  # noqa: BLE001 (a timeout is a miss, said with its reason)
                ok, why = False, repr(e)
            else:
                why = "exit status"
            took = time.monotonic() - t
            self.polls, self.longest = self.polls + 1, max(self.longest, took)
            if not ok:
                self.misses.append(f"{time.strftime('%H:%M:%S')} {why}")
            self._stop.wait(max(0.0, 2.0 - took))


def oom_kills(guest, since: float) -> tuple[list[str], list[dict]]:
    """Who the kernel's OOM killer took since `since`, and docker's `oom` events of the serving container.

    The kernel's log is THE record: `oom-kill:... task_memcg=<the victim's cgroup>,task=...` and `Out of memory:
    Killed process PID (NAME) ... oom_score_adj:N`. Docker's OOMKilled comes from containerd's watcher of the
    container's memory.events, and the container runs with --rm: its State goes with it, so the `oom` event is what
    is left of it (its first run here had one in case a and none in case b: a watcher that reads memory.events after
    the container's cgroup is gone would miss it, not established). So the kernel's log is what this test requires,
    and docker's event is reported beside it."""
    kernel = guest.ssh(f"journalctl -k --since @{int(since)} --no-pager -o cat | grep -E 'oom-kill:|Killed process'",
                       check=False).stdout.splitlines()
    out = guest.ssh(f"timeout 10 docker events --since {int(since)} --until $(date +%s) --format '{{{{json .}}}}' "
                    f"--filter container={SERVICE} --filter event=oom", check=False).stdout
    return kernel, [json.loads(line) for line in out.splitlines() if line.strip()]


def assert_the_container_was_the_victim(kernel: list[str]) -> None:
    """Every process the OOM killer took was the serving container's: in a docker cgroup, with its oom_score_adj, and
    killed by its cgroup's cap (constraint=CONSTRAINT_MEMCG, the memory cap drop-caches computes), never by the whole
    guest running out (CONSTRAINT_NONE: the thrashing that made SSH logins wait past the bound before the cap)."""
    victims = [line for line in kernel if "Killed process" in line]
    assert victims, "the kernel's OOM killer killed nothing"
    assert all(f"oom_score_adj:{OOM_SCORE_ADJ}" in line for line in victims), victims
    kills = [line for line in kernel if "oom-kill:" in line]
    memcgs = [line.split("task_memcg=", 1)[1].split(",", 1)[0] for line in kills if "task_memcg=" in line]
    assert memcgs and all("docker" in m for m in memcgs), kernel
    assert all("constraint=CONSTRAINT_MEMCG" in line for line in kills), kills


def serving(guest) -> dict:
    st = {"release": json.loads(lab.guest_release_json(guest)).get("id"),
          "gate": json.loads(guest.ssh(f"cat {GATE_FILE}", check=False).stdout or "{}")}
    try:
        st["text"] = lab.guest_curl_completion(guest)["choices"][0]["text"].strip()
    except Exception as e:  # noqa: BLE001 (what was served is the point)
        st["text"] = ""
        st["error"] = str(e)[:200]
    return st


def assert_the_restart_policy_served_it_again(guest, since: float, st: dict, release: str, before: dict,
                                              poll: SshPoller, client_killed: bool = False) -> None:
    """The unit's journal: the container's main process was killed (137: its `docker run` client exits so), or,
    where earlyoom also killed that client (`client_killed`), the unit's main process by SIGKILL; drop-caches ran
    before the restart; the same release serves again; sshd and dockerd live on; SSH answered every poll."""
    journal = guest.ssh(f"journalctl -u {SERVICE} --since @{int(since)} --no-pager -o cat").stdout
    ended = ("status=137",) + (("code=killed, status=9/KILL",) if client_killed else ())
    assert any(e in journal for e in ended) and "drop-caches: flushed dirty pages" in journal, journal[-3000:]
    assert st["release"] == release, st
    assert daemons(guest) == before, "sshd or dockerd was killed or restarted"
    assert not poll.misses, f"SSH did not answer {len(poll.misses)} of {poll.polls} polls: {poll.misses[:5]}"


def test_a_load_that_exhausts_memory_is_killed_and_the_gate_reverts(spark):
    """(a) Release B's server allocates without bound while loading: the kernel kills the container's process (its
    log names the victim, in the container's cgroup, oom_score_adj 1000), not sshd or dockerd; SSH answers throughout; the gate fails and reverts, and the host serves A again."""
    guest, inventory = spark
    before, since = daemons(guest), float(guest.ssh("date +%s.%N").stdout)
    inv_b = lab.with_vars(inventory, inventory.with_name("oom-load.yml"), image=TAGS["oom_load"])
    with SshPoller(guest) as poll:
        run = lab.run_pyinfra(inv_b, DEPLOY)
        st = lab.wait_for("A to serve again", lambda: (s := serving(guest))["text"] and s, 300, 2)
    back = time.time()
    assert run.returncode != 0, "the converge of a release that cannot load passed"
    assert "failed its readiness gate" in run.output() and f"rolled back to {STATE['A']}" in run.output(), \
        run.output()[-3000:]
    kernel, events = oom_kills(guest, since)
    assert_the_container_was_the_victim(kernel)
    assert st["release"] == STATE["A"] and st["gate"]["result"] == "passed", st
    assert "rolled back" in st["gate"].get("detail", ""), st
    assert daemons(guest) == before, "sshd or dockerd was killed or restarted"
    assert not poll.misses, f"SSH did not answer {len(poll.misses)} of {poll.polls} polls: {poll.misses[:5]}"
    figure("memory: (a) OOM while loading -> A serving again (the gate's revert)",
           f"{back - since:.1f} s from the switch's start; SSH answered {poll.polls} polls, longest "
           f"{poll.longest:.1f} s; docker's oom event " + (f"{back - events[0]['time']:.1f} s before" if events else "missed"))


def test_a_request_that_exhausts_memory_is_killed_and_the_restart_policy_serves_again(spark):
    """(b) Release C serves (its gate's smoke prompt is short); a prompt over OOM_PROMPT_TOKENS makes it allocate
    without bound: the kernel kills the container, the unit says it (its main process ended, NRestarts + 1), the
    restart policy starts it again (drop-caches first), and C serves again."""
    guest, inventory = spark
    inv_c = lab.with_vars(inventory, inventory.with_name("oom-request.yml"), image=TAGS["oom_request"])
    run = lab.run_pyinfra(inv_c, DEPLOY)
    assert run.returncode == 0, run.output()[-3000:]
    c = serving(guest)
    assert c["text"] and c["release"] != STATE["A"], c
    restarts = int(guest.ssh(f"systemctl show -p NRestarts --value {SERVICE}").stdout.strip() or 0)
    before, since = daemons(guest), float(guest.ssh("date +%s.%N").stdout)
    body = json.dumps({"model": "openai/gpt-oss-120b", "prompt": "word " * (OOM_PROMPT_TOKENS + 10), "max_tokens": 8})
    with SshPoller(guest) as poll:
        asked = guest.ssh(f"curl -sS -m 120 http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' "
                          f"-d '{body}'", check=False)
        lab.wait_for("the unit to restart the container (its restart policy)", lambda: int(
            guest.ssh(f"systemctl show -p NRestarts --value {SERVICE}").stdout.strip() or 0) > restarts, 300, 2)
        st = lab.wait_for("C to serve again", lambda: (s := serving(guest))["text"] and s, 300, 2)
    back = time.time()
    assert asked.returncode != 0, "the long request was answered: nothing ran out of memory"
    kernel, events = oom_kills(guest, since)
    assert_the_container_was_the_victim(kernel)
    assert_the_restart_policy_served_it_again(guest, since, st, c["release"], before, poll)
    figure("memory: (b) OOM on a request -> C serving again (the restart policy)",
           f"{back - since:.1f} s from the request; SSH answered {poll.polls} polls, longest {poll.longest:.1f} s; "
           "docker's oom event " + (f"{back - events[0]['time']:.1f} s before" if events else "missed"))


HOG_UNIT = "specfleet-test-unified-memory"  # the stand-in for a GB10's GPU allocations, as a transient unit
HOG = Path(__file__).with_name("unified_memory_standin.py")


def earlyoom_floor_kib(guest) -> int:
    """The floor earlyoom runs with (its SIGKILL size, from its command line: what the deploy's drop-in gave it)."""
    argv = guest.ssh(f"tr '\\0' ' ' < /proc/$({main_pid(EARLYOOM_UNIT)})/cmdline").stdout.split()
    assert argv[1] == "-M", argv
    return int(argv[2].split(",")[1])


def test_memory_taken_outside_the_container_is_met_by_earlyoom_which_ends_the_container(spark):
    """(c) On a GB10 the GPU's allocations are not charged to the container's cgroup: its cap cannot hold them. A root
    process outside the container (the stand-in for the driver) fills the server's device memory (a memfd the
    trtllm-serve stand-in holds: the pages are charged to the filler's cgroup and go when the server's process does)
    until MemAvailable is one piece below earlyoom's floor: earlyoom kills the container's processes and nothing
    else, before the kernel's OOM killer has to act; SSH answers throughout; the memory goes with the server, and the
    restart policy serves the release again."""
    guest, inventory = spark
    now = serving(guest)
    assert now["text"], now
    floor = earlyoom_floor_kib(guest)
    restarts = int(guest.ssh(f"systemctl show -p NRestarts --value {SERVICE}").stdout.strip() or 0)
    container = set(guest.ssh(f"docker top {SERVICE} -eo pid").stdout.split()[1:])  # host PIDs, under the header
    # the serving unit's own processes (its `docker run` client): the container's, but in the unit's cgroup
    unit = set(guest.ssh(f"cat /sys/fs/cgroup$(systemctl show -p ControlGroup --value {SERVICE})/cgroup.procs").stdout.split())
    before, since = daemons(guest), float(guest.ssh("date +%s.%N").stdout)
    guest.ssh("cat > /run/unified_memory_standin.py", input=HOG.read_bytes())
    guest.ssh(f"systemd-run --unit={HOG_UNIT} --quiet python3 /run/unified_memory_standin.py {floor - 8 * 1024} "
              f"{DEVICE_MEMORY}")
    try:
        with SshPoller(guest) as poll:
            lab.wait_for("the unit to restart the container (its restart policy)", lambda: int(
                guest.ssh(f"systemctl show -p NRestarts --value {SERVICE}").stdout.strip() or 0) > restarts, 300, 2)
            st = lab.wait_for("the release to serve again", lambda: (s := serving(guest))["text"] and s, 300, 2)
    finally:
        guest.ssh(f"systemctl stop {HOG_UNIT}; systemctl reset-failed {HOG_UNIT}", check=False)
    back = time.time()
    kills = guest.ssh(f"journalctl -u {EARLYOOM_UNIT} --since @{int(since)} --no-pager -o cat", check=False).stdout
    # earlyoom 1.7: `sending SIGKILL to process PID uid U "NAME": badness N, VmRSS M MiB`. The first victim is the
    # container's; earlyoom looks again 100 ms after it has seen the server end (a zombie: earlyoom v1.7 kill.c kill_wait,
    # main.c poll_loop/sleep_time_ms' 100 ms minimum), and when the server's memory
    # is still being freed then (1.4 GB under TCG, by its last thread), it may take the serving unit's `docker run`
    # client too: that is the serving unit's, which restarts anyway. Nothing else, ever.
    sent = [line for line in kills.splitlines() if line.startswith("sending SIG")]
    victims = [line.split()[4] for line in sent]
    assert victims and victims[0] in container and set(victims) <= container | unit, (container, unit, kills[-3000:])
    hog = guest.ssh(f"journalctl -u {HOG_UNIT} --since @{int(since)} --no-pager -o cat", check=False).stdout
    filled = hog.split("filling process ", 1)[-1].split("'", 1)[0]
    assert filled in container, (container, hog)  # the device memory it filled was the server's
    assert f"process {filled} ended: its" in hog, hog  # and went with it; the filler was no one's victim
    kernel, _ = oom_kills(guest, since)
    assert not [line for line in kernel if "Killed process" in line], kernel  # earlyoom acted before the kernel had to
    assert_the_restart_policy_served_it_again(guest, since, st, now["release"], before, poll,
                                              client_killed=bool(set(victims) & unit))
    figure("memory: (c) memory taken outside the container -> earlyoom's kill -> serving again (restart policy)",
           f"{back - since:.1f} s from the stand-in's start; floor {floor // 1024} MiB; SSH answered {poll.polls} "
           f"polls, longest {poll.longest:.1f} s; earlyoom: " + "; ".join(line.split(":", 1)[0] for line in sent))


HELD_UNIT = "specfleet-test-held-memory"


def memory_kib(guest) -> tuple[int, int]:
    """The host's MemTotal and MemAvailable (KiB): what its kernel counts, and what a container on it reads."""
    out = guest.ssh("grep -E '^(MemTotal|MemAvailable):' /proc/meminfo").stdout.split()
    return int(out[1]), int(out[4])


@pytest.mark.kernel("memory-available")
def test_a_vllm_share_above_what_is_free_at_start_up_fails_the_gate_and_the_previous_release_serves(spark):
    """(d) vLLM asks ceil(MemTotal * share) free at start-up and refuses less (vLLM 0.20.1's check, the vLLM
    stand-in's memory_check, which reads the container's /proc/meminfo). A process outside the container holds memory
    while the host switches from its TensorRT-LLM release to vllm_eagle3: the memory fit passes (it reads MemTotal),
    every start fails with vLLM's line, the gate fails, and the host serves its previous release again. What is held
    is measured before the deploy starts: a mechanism, not a race."""
    guest, inventory = spark
    now = serving(guest)
    assert now["text"], now
    lab.make_vllm_standin_in_guests(STATE["fleet"])
    vllm = lab.with_vars(inventory, STATE["fleet"].workdir / "vllm-inventory.yml", vllm_image=lab.VLLM_STANDIN_TAG,
                         vllm_gpu_memory_utilization=lab.VLLM_LAB_SHARE)
    total, free = memory_kib(guest)
    asked = math.ceil(total * lab.VLLM_LAB_SHARE)
    hold = free - asked // 2  # KiB: leaves half of what vLLM asks, above earlyoom's floor
    floor = earlyoom_floor_kib(guest)
    assert asked // 2 > floor, (asked, floor)
    since = int(float(guest.ssh("date +%s.%N").stdout))
    guest.ssh(f"systemd-run --unit={HELD_UNIT} --quiet python3 -c "
              f"'import time; b = b\"x\" * ({hold} << 10); time.sleep(3600)'")
    try:
        lab.wait_for("the held memory to be taken", lambda: memory_kib(guest)[1] < asked * 3 // 4, 300, 2)
        start = time.monotonic()
        run = lab.run_pyinfra(vllm, "vllm_eagle3")
        seconds = time.monotonic() - start
    finally:
        guest.ssh(f"systemctl stop {HELD_UNIT}; systemctl reset-failed {HELD_UNIT}", check=False)
    assert run.returncode != 0, run.output()[-3000:]
    journal = guest.ssh(f"journalctl -q --no-pager -o cat -u {VLLM.unit} --since @{since}").stdout
    refused = [line for line in journal.splitlines() if "Free memory on device cuda:0" in line]
    assert refused and f"on startup is less than desired GPU memory utilization ({lab.VLLM_LAB_SHARE}," in refused[0], \
        journal[-3000:]
    # what the host serves afterwards: its previous release, TensorRT-LLM's unit, answering
    st = serving(guest)
    assert st["release"] == now["release"] and st["text"], st
    assert json.loads(lab.guest_release_json(guest))["engine"] == "trtllm"
    assert guest.ssh(f"systemctl is-active {SERVICE}").stdout.strip() == "active"
    figure("memory: (d) a vLLM share above what is free at start-up -> refused, the previous release serving",
           f"{seconds:.1f} s for the deploy; {hold // 1024} MiB held, {asked // 1024} MiB asked; vLLM: "
           + refused[0].split("ERROR [vllm-standin] ", 1)[-1][:120])
