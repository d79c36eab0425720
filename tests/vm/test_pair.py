"""A two-Spark pair converged for real on two guests joined by the stand-in CX-7 link
(lab/specfleet_lab/pair_link.py; a pair's image adds netplan.io and ping, recipe.PAIR_PACKAGES). The deploy applies
the link's netplan with confirm-or-revert, generates the pair's keys on the head and authorizes them on the worker,
fetches the models on both hosts, and the head's host job switches both: the worker's container holds its side, the
head's runs real OpenMPI (`mpirun ... trtllm-llmapi-launch trtllm-serve`, the pair's stand-in image at 1.3.0rc12)
whose rank 1 runs in the worker's container through the pair gate. Each test ends with what the pair serves.
Two guests of their own on a network of their own, the session fleet paused meanwhile; a gateway guest joins them
last: --full."""

from __future__ import annotations

import json
import os
import shlex
import signal
import time

import pytest
import yaml

import specfleet_lab
from specfleet import defaults
from specfleet.host.layout import NETPLAN_FILE as NETPLAN
from specfleet.host.layout import PAIR_USER
from tests.vm import gateway_lab, lab
from tests.vm import wheelhouse as wheelhouse_mod
from tests.vm.conftest import cache_dir, figure, own_guests
from tests.vm.hub_standin import STANDIN_TOKEN
from tests.vm.test_rollout import Gateway, _gateway_curl, _wait_pool

pytestmark = [pytest.mark.vm, pytest.mark.full]

DEPLOY = "qwen3_eagle3_pair"
PAIR_TAG = f"{lab.STANDIN_REPO}:1.3.0rc12-standin"  # the pair's stand-in: OpenMPI, an SSH client, mpi4py
MODEL = "nvidia/Qwen3-235B-A22B-FP4"
DATA = "/var/lib/specfleet"
WORKER_LINK = "192.168.100.11"  # the worker's address on the link's first subnet (NVIDIA's .11)
STATE: dict = {}


def pair_inventory(fleet, hub_port: int, out):
    """The lab's fleet file (ci_vars, the pair's stand-in image) with its two hosts as group pair_a: spark-1 the
    head, spark-2 the worker; the link's names, subnets and addresses are the defaults (NVIDIA's). The lab's link is
    no CX-7: where it reports a speed (a container host's veth: 10000 Mb/s; a QEMU guest's virtio reports none), the
    pair's least speed is that one, so the preflight's speed check runs against a link it can pass. Locked."""
    inv = yaml.safe_load(fleet.inventory_path.read_text())
    inv["all"].setdefault("vars", {}).update(
        lab.ci_vars(hub_port, fleet.controller_address, PAIR_TAG, fleet.driver.bind_address), operator_users=["spark"])
    speed = fleet.guests[0].ssh(f"cat /sys/class/net/{defaults.pair_link_interfaces[0]}/speed 2>/dev/null",
                                check=False).stdout.strip()
    if speed.isdigit() and int(speed) > 0:
        inv["all"]["vars"]["pair_link_min_speed_mbps"] = int(speed)
    hosts = inv["all"]["children"]["vm_fleet"]["hosts"]
    hosts["spark-1"]["pair_role"], hosts["spark-2"]["pair_role"] = "head", "worker"
    inv["all"]["children"]["pair_a"] = {"hosts": {"spark-1": {}, "spark-2": {}}}
    out.write_text(yaml.safe_dump(inv, sort_keys=False))
    return lab.write_lock(out)


@pytest.fixture(scope="module")
def pair(tmp_path_factory, request, hub, wheelhouse):
    # on a shared guest network of their own too (eth1), which a gateway guest joins at the end of the module
    fleet = own_guests(tmp_path_factory, request, "pair", "pair: boot 2 guests with the stand-in CX-7 link",
                       pair_link=True, lan=True)
    STATE["fleet"] = fleet
    t0 = time.monotonic()
    n_cas = lab.trust_controller_cas(fleet)
    mirrored = [g for g in fleet.guests if wheelhouse and wheelhouse_mod.guest_arch(g) in wheelhouse.arches]
    index_url = wheelhouse.index_url_for(fleet.controller_address) if wheelhouse else None
    lab.configure_guest_pip(fleet, index_url, cert=n_cas > 0, guests=mirrored)
    lab.load_standin_image(fleet, cache_dir(), tag=PAIR_TAG, version="1.3.0rc12", pair=True)
    inventory = pair_inventory(fleet, hub.port, fleet.workdir / "pair-inventory.yml")
    figure("pair: prepare (CAs, pip mirror, the pair's stand-in image, fleet file + lock)",
           f"{time.monotonic() - t0:.1f} s")
    return fleet.guests[0], fleet.guests[1], inventory


def serving(head, worker) -> dict:
    """What the pair serves: the head's completion through its port, both hosts' gate results and releases, and the
    stand-in's ranks in the worker's container."""
    out = {}
    for role, g in (("head", head), ("worker", worker)):
        gate = g.ssh(f"cat {DATA}/gate.json 2>/dev/null || echo '{{}}'", check=False).stdout
        out[role] = {"gate": json.loads(gate or "{}"), "release": json.loads(lab.guest_release_json(g)).get("id"),
                     "active": g.ssh("systemctl is-active specfleet-trtllm", check=False).stdout.strip()}
    # the worker's rank as the worker's host sees it (the container has no procps); [m]: not this command's own sh
    out["worker_ranks"] = worker.ssh("pgrep -fc '[m]gmn_worker_node'", check=False).stdout.strip()
    try:
        out["text"] = lab.guest_curl_completion(head, model=MODEL)["choices"][0]["text"].strip()
    except Exception as exc:  # noqa: BLE001 (what was served is the point: the assertion says it)
        out["text"] = f"no completion: {exc}"[:300]
    return out


def test_converge_a_pair(pair):
    head, worker, inventory = pair
    run = lab.run_pyinfra(inventory, DEPLOY, "-v", json_out=False)
    assert run.returncode == 0, run.output()[-6000:]
    assert STANDIN_TOKEN not in run.output()
    figure("pair: first converge (link, keys, models on both, the head's switch of both)", f"{run.seconds:.1f} s")
    st = serving(head, worker)
    assert st["head"]["gate"].get("result") == "passed" and st["head"]["active"] == "active", st
    assert st["worker"]["gate"].get("role") == "worker" and st["worker"]["gate"].get("result") == "passed", st
    assert st["worker"]["active"] == "active", st
    assert st["worker_ranks"] == "1", st  # rank 1 of the head's mpirun runs in the worker's container
    assert st["text"] and not st["text"].startswith("no completion"), st
    STATE["first"] = st


def test_a_second_converge_changes_nothing(pair):
    head, worker, inventory = pair
    started = {g.name: g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()
               for g in (head, worker)}
    run = lab.run_pyinfra(inventory, DEPLOY)
    assert run.returncode == 0, run.output()[-4000:]
    assert run.result is not None, "no pyinfra JSON result: cannot tell what changed"
    assert run.n_changed == 0, f"second converge changed: {run.changed}"
    figure("pair: second converge (no change)", f"{run.seconds:.1f} s")
    assert {g.name: g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm").stdout.strip()
            for g in (head, worker)} == started, "a container was restarted"
    st = serving(head, worker)
    assert st["head"]["release"] == STATE["first"]["head"]["release"] and st["worker_ranks"] == "1", st
    assert st["text"] and not st["text"].startswith("no completion"), st


def test_status_shows_the_pair_as_one_healthy_row(pair):
    head, worker, inventory = pair
    proc = lab.run_specfleet("status", "inventory.py", "--json", inventory=inventory, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout)
    assert [r.get("hosts") for r in rows] == [["spark-1", "spark-2"]], rows
    assert rows[0]["healthy"] is True, rows


def test_testinfra_on_both_hosts(pair):
    """The testinfra suite, as a user runs it: the worker's checks (its side of the head's release, the head's keys
    authorized behind the gate, models, unit, container), the endpoint checks on the head."""
    proc = lab.run_infra_suite(pair[2], extra=("-rs",))
    assert proc.returncode == 0, proc.stdout[-5000:]
    # -rs folds the same reason from the same line into one `SKIPPED [N] file:line: reason`
    skipped = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    worker = [ln for ln in skipped if "spark-2 is a pair's worker: the pair serves through its head" in ln]
    assert sum(int(ln.split("[", 1)[1].split("]", 1)[0]) for ln in worker) == 3, skipped


def test_the_mpi_key_cannot_run_a_command_on_the_worker(pair):
    """`ssh worker id` with the pair's MPI key, from the head, as mpirun's agent would connect (pinned host key): the
    worker's pair gate refuses it (126) and runs nothing; the pair still serves."""
    head, worker, _ = pair
    key, known = f"{DATA}/pair/mpi_key", f"{DATA}/pair/known_hosts"
    got = head.ssh(f"ssh -F /dev/null -i {key} -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes "
                   f"-o UserKnownHostsFile={known} -o GlobalKnownHostsFile=/dev/null {PAIR_USER}@{WORKER_LINK} id",
                   check=False)
    assert got.returncode == 126, (got.returncode, got.stdout, got.stderr)
    assert "pair-gate: refused: 'id' is not orted" in got.stderr and "uid=" not in got.stdout, got.stderr
    st = serving(head, worker)
    assert st["text"] and not st["text"].startswith("no completion") and st["worker_ranks"] == "1", st


# ---- point 6: faults, each ending with what the pair serves -------------------------------------------------------
def serves(st: dict) -> bool:
    return bool(st["text"]) and not st["text"].startswith("no completion") and st["worker_ranks"] == "1"


def served(head, worker) -> dict | None:
    """serving(), when the pair serves (for wait_for)."""
    st = serving(head, worker)
    return st if serves(st) else None


def n_restarts(g) -> int:
    """systemd's count of automatic restarts of the serving unit (since its last manual start)."""
    return int(g.ssh("systemctl show -p NRestarts --value specfleet-trtllm").stdout.strip() or 0)


def started(head, worker) -> dict:
    """When each host's serving container started: unchanged means not restarted."""
    return {g.name: g.ssh("docker inspect --format '{{.State.StartedAt}}' specfleet-trtllm", check=False).stdout.strip()
            for g in (head, worker)}


def release_b(pair, name: str = "pair-b.yml"):
    """Release B of the pair: another draft length, so both hosts' rendered files (and so both ids) change."""
    return lab.with_vars(pair[2], pair[2].with_name(name),
                         extra_llm_api_options={"speculative_config": {"max_draft_len": 2}})


def test_the_workers_container_killed_the_pair_recovers_and_says_so(pair):
    """The worker's container dies (docker kill): the head's MPI world ends with its rank, each unit's restart policy
    starts its side again, and the pair serves the same release; the head's unit says it restarted (NRestarts)."""
    head, worker, _ = pair
    before = serving(head, worker)
    assert serves(before), before
    restarts = {g.name: n_restarts(g) for g in (head, worker)}
    t0 = time.monotonic()
    worker.ssh("docker kill specfleet-trtllm")
    lab.wait_for("both units to restart their side (the head's world ended with the worker's rank)",
                 lambda: all(n_restarts(g) > restarts[g.name] for g in (head, worker)), 300, 2)
    st = lab.wait_for("the pair to serve again", lambda: served(head, worker), 600, 5)
    figure("pair: worker's container killed -> serving again (restart policies)", f"{time.monotonic() - t0:.1f} s")
    assert st["head"]["release"] == before["head"]["release"] and st["worker"]["active"] == "active", st
    # the head's relaunch waited in the worker's gate for the worker's container instead of failing: one start each
    assert {g.name: n_restarts(g) - restarts[g.name] for g in (head, worker)} == {"spark-1": 1, "spark-2": 1}


def test_the_workers_docker_down_at_a_switch_reverts_both(pair):
    """Release B staged on both hosts; then the worker's docker fails to start exactly once (a drop-in's
    ExecStartPre, a flag file) and is stopped, and the pair switches: the worker's side fails, the head's job
    reverts the worker first (docker starts then), then itself, and release A serves again on both."""
    from specfleet.fleet.run import run_on
    from specfleet.plan import build_plans, load_inventory_or_fail
    from specfleet.steps import stage, switch

    head, worker, _ = pair
    a = serving(head, worker)
    assert serves(a), a
    inv_b = release_b(pair)
    env = {"SPECFLEET_INVENTORY": str(inv_b), "HF_TOKEN": STANDIN_TOKEN}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    both = ["spark-1", "spark-2"]
    try:
        plans = build_plans(load_inventory_or_fail(), DEPLOY)
        assert run_on(plans, both, stage) == set()
        lab.docker_fails_once(worker)
        failed = run_on(plans, both, switch)
    finally:
        for k, v in old_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        lab.docker_restored(worker)
    assert failed, "the switch with the worker's docker down cannot succeed"
    st = lab.wait_for("release A to serve on both", lambda: served(head, worker), 300, 5)
    assert st["head"]["release"] == a["head"]["release"] and st["worker"]["release"] == a["worker"]["release"], st
    assert st["head"]["gate"]["result"] == "passed" and "rolled back" in st["head"]["gate"].get("detail", ""), st
    log = head.ssh(f"cat $(ls -d {DATA}/jobs/*/ | tail -n 1)log").stdout
    assert "asking the worker spark-2" in log and "reverting to previous release" in log, log[-3000:]


def test_the_link_down_is_refused_before_anything_changes(pair):
    """The worker's first link interface down: a converge of release B is refused by the preflight with one line
    naming the host and the interface, before anything changes; with the link up again, A still serves."""
    head, worker, _ = pair
    a = serving(head, worker)
    assert serves(a), a
    up_since = started(head, worker)
    nic = "enp1s0f1np1"
    try:
        worker.ssh(f"ip link set {nic} down")
        run = lab.run_pyinfra(release_b(pair), DEPLOY)
    finally:
        worker.ssh(f"ip link set {nic} up", check=False)
    assert run.returncode != 0, run.output()[-3000:]  # pyinfra prints no JSON result once every host failed
    lines = [ln for ln in run.output().splitlines() if nic in ln and "spark-2" in ln]
    assert lines, run.output()[-3000:]
    st = lab.wait_for("A to serve", lambda: served(head, worker), 300, 5)
    assert (st["head"]["release"], st["worker"]["release"]) == (a["head"]["release"], a["worker"]["release"]), st
    assert started(head, worker) == up_since, "a container was restarted"


def test_a_link_on_the_management_interface_is_refused(pair):
    """A link whose first interface is eth0, the interface the controller's SSH comes in on, in a subnet no interface
    has yet (so that the preflight's overlap check, which would refuse 192.168.100.0/24 still on enp1s0f1np1, lets it
    through to the link step): pair-link refuses it on each host before netplan runs; eth0 keeps its address and A
    still serves."""
    head, worker, inventory = pair
    a = serving(head, worker)
    assert serves(a), a
    up_since = started(head, worker)
    eth0 = {g.name: g.ssh("ip -4 -o addr show eth0 | awk '{print $4}'").stdout for g in (head, worker)}
    inv = lab.with_vars(inventory, inventory.with_name("pair-eth0.yml"), pair_link_interfaces=["eth0", "enP2p1s0f1np1"],
                        pair_link_subnets=["192.168.102.0/24", "192.168.101.0/24"])
    run = lab.run_pyinfra(inv, DEPLOY)
    assert run.returncode != 0, run.output()[-3000:]
    refused = [ln for ln in run.output().splitlines() if "would change eth0, which carries this host's SSH" in ln]
    assert {h for h in ("spark-1", "spark-2") if any(f"[{h}]" in ln for ln in refused)} == {"spark-1", "spark-2"}, \
        run.output()[-3000:]
    assert {g.name: g.ssh("ip -4 -o addr show eth0 | awk '{print $4}'").stdout for g in (head, worker)} == eth0
    st = serving(head, worker)
    assert serves(st) and st["head"]["release"] == a["head"]["release"], st
    assert started(head, worker) == up_since and head.ssh(f"test -e {NETPLAN}").returncode == 0
    assert "eth0" not in head.ssh(f"cat {NETPLAN}").stdout  # the link in place is the one A applied


def test_the_controller_killed_mid_switch_the_head_finishes_both(pair):
    """The converge of release B killed (SIGKILL to its process group) while the head's job is in its switch: the
    test holds the worker's switch lock (flock, released by removing a file), so the head's ask waits on the worker
    (pair_switch.LOCK_SEC) until the controller is dead. The job finishes on the head, both hosts serve B, and a
    re-run changes nothing."""
    head, worker, _ = pair
    a = serving(head, worker)
    assert serves(a), a
    inv_b = release_b(pair)
    worker.ssh("touch /run/sf-hold && setsid nohup flock /var/lib/specfleet/.pair-switch.lock sh -c "
               "'touch /run/sf-held; while [ -e /run/sf-hold ]; do sleep 0.2; done; rm -f /run/sf-held' "
               ">/dev/null 2>&1 < /dev/null &")
    try:
        lab.wait_for("the test to hold the worker's switch lock",
                     lambda: worker.ssh("test -e /run/sf-held", check=False).returncode == 0, 60, 1)
        proc = lab.start_pyinfra(inv_b, DEPLOY)
        lab.wait_for("the head's switch to be running",
                     lambda: '"result": "running"' in head.ssh(f"cat {DATA}/gate.json", check=False).stdout
                     and head.ssh(f"basename $(readlink {DATA}/current)", check=False).stdout.strip()
                     not in ("", a["head"]["release"]), 900, 1)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(60) == -signal.SIGKILL, "the controller ended before it was killed"
        # in flight: the worker has not switched (its ask waits for the lock this test holds)
        assert json.loads(lab.guest_release_json(worker)).get("id") == a["worker"]["release"]
    finally:
        worker.ssh("rm -f /run/sf-hold", check=False)
    st = lab.wait_for("the head's job to finish",
                      lambda: (s := serving(head, worker))["head"]["gate"].get("result") in ("passed", "failed") and s,
                      600, 5)
    assert st["head"]["gate"]["result"] == "passed" and st["head"]["release"] != a["head"]["release"], st
    assert st["worker"]["release"] != a["worker"]["release"] and serves(st), st
    STATE["serving_inventory"] = inv_b
    rerun = lab.run_pyinfra(inv_b, DEPLOY)
    assert rerun.returncode == 0 and rerun.result is not None, rerun.output()[-3000:]
    assert rerun.n_changed == 0, (rerun.changed, rerun.output()[-3000:])


@pytest.fixture(scope="module")
def pair_gateway(request, pair) -> Gateway:
    """A gateway guest joins the pair's network; the pair serves qwen3_eagle3_pair behind it: the gateway's converge,
    then the pair's, until the head is UP in the pool. Down at module teardown (before the pair's guests), also on
    failure or SIGTERM. A join that fails is an error of each test that needs it."""
    fleet = STATE["fleet"]
    workdir = fleet.workdir / "gateway"
    request.addfinalizer(lambda: specfleet_lab.down(workdir))
    t0 = time.monotonic()
    gw_fleet = gateway_lab.boot(fleet, workdir, cache_dir())
    # the fleet file the pair serves now: joining a gateway must not switch it (a converge behind gateways
    # refuses to restart every host of a model at once; that is `specfleet rollout`'s)
    inv = gateway_lab.inventory(STATE.get("serving_inventory", pair[2]), gw_fleet,
                                fleet.workdir / "pair-gateway.yml", fleet.workdir / "api-keys",
                                serves="qwen3_eagle3_pair")
    for deploy in ("gateway", DEPLOY):  # the gateway first (the head's drain waits for it), then the pair joins
        run = lab.run_pyinfra(inv, deploy)
        assert run.returncode == 0, run.output()[-4000:]
    gateway = Gateway(gw_fleet.guests[0], inv, workdir)
    _wait_pool(gateway, {"spark-1": "UP"})
    figure("pair: a gateway joins (boot, its converge, the pair's) until the head is UP",
           f"{time.monotonic() - t0:.1f} s")
    return gateway


def test_behind_a_gateway_only_the_head_is_a_backend_and_answers(pair, pair_gateway):
    """Behind the gateway (pair_gateway), the gateway's pool holds the head only, UP, and a completion with the
    clients' key comes through the gateway, served by both ranks; without the key, 401."""
    head, worker, _ = pair
    pool = _wait_pool(pair_gateway, {"spark-1": "UP"})
    assert "spark-2" not in pool, pool  # the worker is no backend
    body = json.dumps({"model": MODEL, "prompt": "Say hello.", "max_tokens": 16})
    assert _gateway_curl(pair_gateway, "/v1/completions", None, body)[0] == 401
    code, text = _gateway_curl(pair_gateway, "/v1/completions", gateway_lab.KEY, body)
    assert code == 200 and json.loads(text)["choices"][0]["text"].strip(), text
    assert serves(serving(head, worker))


def test_a_rollout_behind_the_gateway_drains_the_head_before_the_pair_switches(pair, pair_gateway):
    """`specfleet rollout` of release C of the pair behind the gateway: the pair is one member of one batch (the
    only backend of its model, which a rollout may switch). The head's job drains the head first: the gateway was
    answered `down` (the agent's acknowledgement) before the head's launch was stopped. Then both hosts serve C, the
    head is UP in the pool again, and a completion comes through the gateway."""
    head, worker, _ = pair
    gateway = pair_gateway
    before = serving(head, worker)
    assert serves(before), before
    inv_c = lab.with_vars(gateway.inventory, gateway.inventory.with_name("pair-c.yml"),
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 2}, "max_batch_size": 4})
    since = head.ssh("date -u +%Y%m%d-%H%M%S").stdout.strip()  # a job's id begins with its UTC start time
    t0 = time.monotonic()
    proc = lab.run_specfleet("rollout", "inventory.py", f"deploys/{DEPLOY}.py", "--batches", "1", inventory=inv_c)
    assert proc.returncode == 0 and "result: SUCCESS" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]
    figure("pair: rollout of the pair behind the gateway (stage both, drain, switch both)",
           f"{time.monotonic() - t0:.1f} s")
    # the head's activate job says, in order: the drain's result, then (after its launch's stop) the worker's switch.
    # (The agent's acks.json keeps only each gateway's LAST `down`, repeated until the gate passes: no order there.)
    job = head.ssh(f"grep -l '\"activate:' {DATA}/jobs/*/job.json | sort | tail -1").stdout.strip()
    assert job and job.rsplit("/", 2)[1] >= since, f"no activate job on the head since {since}: {job!r}"
    log = head.ssh(f"cat {shlex.quote(job.rsplit('/', 1)[0])}/log").stdout.splitlines()
    drained = [i for i, line in enumerate(log) if "drain: 1 of 1 gateway(s) took this host out" in line]
    switched = [i for i, line in enumerate(log) if "asking the worker spark-2 to activate" in line]
    assert drained and switched and drained[0] < switched[0], "\n".join(log[-40:])
    st = lab.wait_for("the pair to serve C", lambda: served(head, worker), 300, 5)
    assert st["head"]["release"] != before["head"]["release"], st
    assert st["worker"]["release"] != before["worker"]["release"] and st["worker"]["gate"]["result"] == "passed", st
    assert "spark-2" not in _wait_pool(gateway, {"spark-1": "UP"})
    body = json.dumps({"model": MODEL, "prompt": "Say hello.", "max_tokens": 16})
    code, text = _gateway_curl(gateway, "/v1/completions", gateway_lab.KEY, body)
    assert code == 200 and json.loads(text)["choices"][0]["text"].strip(), text
