"""Rollouts and rollback on the session fleet (3 hosts, the trtllm-serve stand-in). Runs after the CI sequence in the
same session and fleet; tests run in file order and share STATE.

The rollouts run behind a gateway: a fourth host on the session fleet's network in the inventory group `gateway`, a
load client sending its requests through it during the rollout and the rollback (0 failed); then the gateway's
answers (keys, routes, models, health), and in --full its own scenarios (a reload, a container killed mid-load,
latency against direct requests, a non-gateway peer refused, the key on no disk and reaching no Spark); the module's
gateway test last removes the gateway again."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import specfleet_lab
from specfleet.gateway.render import leave_bound_sec
from specfleet.host.layout import main_pid
from specfleet.serving.run.preview import EXIT_CHANGES
from tests.vm import gateway_lab, lab
from tests.vm.conftest import cache_dir, figure
from tests.vm.standin_common.standin_credentials import CREDENTIALS_SEEN
from tests.vm.test_ci_sequence import api_bytes, file_bytes, started_at

pytestmark = pytest.mark.vm

EAGLE = "nvidia/gpt-oss-120b-Eagle3-long-context"
BAD_TAG = f"{lab.STANDIN_REPO}:1.2.0rc7-bad"
STATE: dict = {}


def serving_inventory(lab_inventory):
    """The inventory of the release the fleet serves now: the lab's, or in --full the one the rollout tests left (C).
    Later modules converge this one, so that a converge is a no-op, not a fleet-wide switch."""
    return STATE.get("serving_inventory", lab_inventory)


def current(fleet) -> dict[str, str]:
    return {g.name: g.ssh("basename $(readlink /var/lib/specfleet/current)").stdout.strip() for g in fleet.guests}


def _seconds(docker_time: str) -> float:
    """docker's RFC 3339 time with nanoseconds (trailing zeros trimmed) as seconds since the epoch."""
    from datetime import datetime
    whole, _, frac = docker_time.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (frac or "0"))


def config_of(guest, rid: str) -> str:
    return guest.ssh(f"cat /var/lib/specfleet/releases/{rid}/extra-llm-api-config.yml").stdout


@dataclass
class Gateway:
    guest: object  # the gateway guest (specfleet_lab.Guest)
    inventory: Path  # the lab's inventory + the group `gateway`, locked
    workdir: Path  # its fleet's (specfleet_lab.down: the removal test stops it early; safe twice)
    url: str = "http://127.0.0.1:8000"  # the gateway's endpoint, as the load client in the gateway guest sees it


@pytest.fixture(scope="module")
def gateway(request, vm_fleet, lab_inventory):
    """The gateway host on the session network (torn down by the removal test, and after the module in any case)."""
    workdir = vm_fleet.workdir / "gateway"
    start = time.monotonic()
    try:
        fleet = gateway_lab.boot(vm_fleet, workdir, cache_dir())
        figure("gateway: boot the gateway guest on the session network", f"{time.monotonic() - start:.1f} s")
        inv = gateway_lab.inventory(lab_inventory, fleet, vm_fleet.workdir / "gateway.yml",
                                    vm_fleet.workdir / "api-keys")
        yield Gateway(fleet.guests[0], inv, workdir)
    finally:
        specfleet_lab.down(workdir)


@pytest.fixture(scope="module")
def base_inventory(gateway, lab_inventory) -> Path:
    """What the module rolls out from: the lab's inventory, behind the gateway in --full."""
    return gateway.inventory if gateway else lab_inventory


def _start_load(gateway):
    """--full: the load client in the gateway guest, through the gateway, until stopped (None in CI). Concurrency 2:
    (N - 1) x one stand-in's capacity is more; bounded by count and time. A pause of 1 s per worker (a request a
    second or so, some hundreds per rollout): the client runs on an emulated CPU beside the Sparks'. With 0.5 s the
    rollout of 3 hosts took 344 s behind the gateway (its stage 123 s) against 254 s (stage 86 s) in CI without
    gateway and client; with 0.2 s, 365 s."""
    if gateway is None:
        return None
    return gateway_lab.start_load(gateway.guest, gateway.url, gateway_lab.KEY, concurrency=2, count=4000,
                                  seconds=1500, pause=1.0, stream_every=2, max_tokens=24)


def _no_failed_requests(load, what: str, at_least: int = 20) -> None:
    if load is None:
        return
    load.stop()
    s = load.summary
    figure(f"gateway: {what}: client requests through the gateway / failed / p50 / p99",
           f"{s['requests']} / {s['failed']} / {s['p50_s']:.3f} s / {s['p99_s']:.3f} s")
    assert s["requests"] >= at_least, s
    assert s["failed"] == 0, f"{what}: failed client requests: {load.failures()[:5]}"


def test_baseline_release_serving(vm_fleet, lab_inventory, base_inventory, gateway, hub):
    if gateway:  # the gateway first (the Sparks' drains wait for it), then the Sparks join it: a converge, no restart
        # each Spark's clock now: what its server logs from here on came through the gateway, or from this module
        STATE["gateway_since"] = _clocks(vm_fleet)
        if any(g.ssh("systemctl is-active specfleet-trtllm", check=False).stdout.strip() != "active"
               for g in vm_fleet.guests):  # the module run alone (no CI sequence before it): the fleet serves first
            run = lab.run_pyinfra(lab_inventory, "eagle3")
            assert run.returncode == 0, run.output()[-3000:]
        run = lab.run_pyinfra(base_inventory, "gateway")
        assert run.returncode == 0, run.output()[-3000:]
        before, start = started_at(vm_fleet), time.monotonic()
        run = lab.run_pyinfra(base_inventory, "eagle3")
        assert run.returncode == 0, run.output()[-3000:]
        _wait_pool(gateway, {g.name: "UP" for g in vm_fleet.guests})
        figure("gateway: the Sparks join it (a converge) until all 3 are UP in its pool", f"{time.monotonic() - start:.1f} s")
        assert started_at(vm_fleet) == before, "joining a gateway restarted a Spark"
    run = lab.run_pyinfra(base_inventory, "eagle3")
    assert run.returncode == 0, run.output()[-3000:]
    if gateway:
        assert run.changed == {}, run.changed
    STATE["A"] = current(vm_fleet)
    assert len(set(STATE["A"].values())) == 1
    STATE["A_config"] = {g.name: config_of(g, STATE["A"][g.name]) for g in vm_fleet.guests}


def test_good_rollout_keeps_the_fleet_available(vm_fleet, base_inventory, gateway, hub):
    """New release: the older EAGLE-3 head commit + max_draft_len 3. Batches 1,1 => largest batch 1, so
    at every second at least N - 1 hosts must answer /v1/completions."""
    from tests.vm.hub_standin import HubStandin
    old_head = HubStandin.commits(EAGLE)[0]
    inv_b = lab.with_vars(base_inventory, vm_fleet.workdir / "release-b.yml", draft_revision=old_head,
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 3}})
    STATE["inv_b"] = inv_b
    lab.start_pollers(vm_fleet)
    load = _start_load(gateway)
    time.sleep(3)
    start = time.time()
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_b)
    end = time.time()
    polls = lab.stop_pollers(vm_fleet)
    _no_failed_requests(load, "a rollout of 3 hosts")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "result: SUCCESS" in proc.stdout
    after = current(vm_fleet)
    assert all(after[h] != STATE["A"][h] for h in after) and len(set(after.values())) == 1
    STATE["B"] = after
    counts = lab.availability_per_second(polls, start + 1, end - 1)
    n = len(vm_fleet.guests)
    assert counts and min(counts) >= n - 1, f"availability per second during the rollout: {counts}"
    # figures: switch downtime per host minus the stand-in's load delay, total vs sum of gates
    downtimes = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in after and parts[-1] == "switched":
            downtimes[parts[0]] = float(parts[-2].rstrip("s"))
    assert set(downtimes) == set(after), proc.stdout
    load_delay = 4.0
    figure("rollout: per-host switch downtime - stand-in load delay",
           ", ".join(f"{h} {d - load_delay:.1f}s" for h, d in downtimes.items()))
    figure("rollout: total time / sum of switch gates", f"{end - start:.1f}s / {sum(downtimes.values()):.1f}s")
    figure("rollout: min hosts answering at any second (N=3, largest batch 1)", str(min(counts)))
    staged = [line.split("stage done in ", 1)[1] for line in (proc.stdout + proc.stderr).splitlines() if "stage done in " in line]
    figure(f"rollout: stage of N={n} hosts at once (gevent-patched entry)", staged[0] if staged else "not logged")


def test_rollback_restores_the_previous_release_byte_for_byte(vm_fleet, base_inventory, gateway, hub):
    hub.reset_log()
    load = _start_load(gateway)
    run = lab.run_pyinfra(base_inventory, "rollback")
    assert run.returncode == 0, run.output()[-3000:]
    _no_failed_requests(load, "a rollback of 3 hosts")
    assert current(vm_fleet) == STATE["A"]
    for g in vm_fleet.guests:
        assert config_of(g, STATE["A"][g.name]) == STATE["A_config"][g.name]
        assert g.ssh("cat /var/lib/specfleet/current/extra-llm-api-config.yml").stdout == STATE["A_config"][g.name]
        answer = lab.guest_curl_completion(g)
        assert answer["choices"][0]["text"].strip()
    assert file_bytes(hub) == 0 and api_bytes(hub) == 0, hub.bytes_served()
    figure("rollback: bytes served by the Hub stand-in", str(hub.total_bytes()))
    if gateway:  # one Spark after the other, the last of the inventory first: the rollout's order backwards
        starts = {h: _seconds(t) for h, t in started_at(vm_fleet).items()}
        order = sorted(starts, key=starts.get)
        figure("rollback behind the gateway: the Sparks' containers started in the order", " ".join(order))
        assert order == [g.name for g in reversed(vm_fleet.guests)], starts
    listing = lab.run_specfleet("releases", "inventory.py", inventory=base_inventory)
    assert listing.returncode == 0
    for g in vm_fleet.guests:
        assert f"* {STATE['A'][g.name]}" in listing.stdout and STATE["B"][g.name] in listing.stdout


# ---- the gateway's own scenarios (--full): the fleet serves A (after the rollback) behind the gateway here --------
def _wait_pool(gateway, wanted: dict[str, str], seconds: float = 90) -> dict[str, str]:
    """Poll the gateway's pool until each named Spark's status starts with its wanted word (UP, DOWN, ...)."""
    deadline = time.monotonic() + seconds
    while True:
        now = gateway_lab.pool(gateway.guest)
        if all(now.get(h, "").startswith(w) for h, w in wanted.items()) or time.monotonic() > deadline:
            assert all(now.get(h, "").startswith(w) for h, w in wanted.items()), f"pool {now}, wanted {wanted}"
            return now
        time.sleep(0.5)


def _gateway_curl(gateway, path: str, key: str | None, body: str | None = None) -> tuple[int, str]:
    """curl in the gateway guest; the key as a header read from stdin (on no command line)."""
    data = f"-H 'Content-Type: application/json' -d '{body}' " if body else ""
    out = gateway.guest.ssh(f"curl -sS -m 30 -H @- -o /tmp/body -w '%{{http_code}}' {data}{gateway.url}{path}; "
                            "echo; cat /tmp/body; rm -f /tmp/body",
                            input=f"Authorization: Bearer {key}\n".encode() if key else b"").stdout
    code, _, text = out.partition("\n")
    return int(code), text


@pytest.mark.full
def test_a_gateway_whose_config_forwards_credentials_takes_the_rules_by_a_reload(vm_fleet, gateway, base_inventory):
    """A running gateway whose config lacks the rules that remove the client's credentials (they are taken out of its
    haproxy.cfg here, and HAProxy reloaded): the gateway deploy proves the rendered config and reloads HAProxy under
    a client's load, which loses no request; the master process stays, no Spark restarts, no release id changes."""
    cfg = "/etc/haproxy/haproxy.cfg"
    rules = gateway.guest.ssh(f"grep -c 'http-request del-header' {cfg}").stdout.strip()  # the deployed config's
    STATE["forwarding_from"] = _clocks(vm_fleet)  # from here until the client's connections closed, it forwarded
    gateway.guest.ssh(f"sudo sed -i '/http-request del-header/d' {cfg} && sudo systemctl reload haproxy")
    master = gateway.guest.ssh(main_pid("haproxy")).stdout.strip()
    before, releases = started_at(vm_fleet), current(vm_fleet)
    plan = lab.run_specfleet("plan", "inventory.py", "deploys/gateway.py", inventory=base_inventory)
    assert plan.returncode == EXIT_CHANGES and "check the config with haproxy -c, then reload haproxy" in plan.stdout, \
        plan.stdout
    offset = gateway_lab.clock_offset(gateway.guest)
    load = _start_load(gateway)
    time.sleep(3)
    start = time.time()
    run = lab.run_pyinfra(base_inventory, "gateway")
    end = time.time()
    assert run.returncode == 0, run.output()[-3000:]
    time.sleep(3)
    _no_failed_requests(load, "the gateway's reload", at_least=1)
    time.sleep(1)  # the old worker served the client's kept-alive connections until they closed
    STATE["forwarding_until"] = _clocks(vm_fleet)
    forwarded = {g.name: _credentials_seen(g, STATE["forwarding_from"][g.name], STATE["forwarding_until"][g.name])
                 for g in vm_fleet.guests}
    figure("gateway: requests with a credential header at the Sparks while its config forwarded them",
           ", ".join(f"{h} {len(seen)}" for h, seen in forwarded.items()))
    assert any(forwarded.values()), "the config without the rules forwarded no credential: the check cannot fail"
    # requests on both sides of the reload: answered before the deploy started, and sent after it ended
    assert any(r["t1"] - offset < start for r in load.records), load.records[:3]
    assert any(r["t0"] - offset > end for r in load.records), load.records[-3:]
    assert any("reload haproxy" in op for op in run.changed.get(gateway_lab.GATEWAY, [])), run.changed
    assert int(rules) > 0 and gateway.guest.ssh(f"grep -c 'http-request del-header' {cfg}").stdout.strip() == rules
    assert gateway.guest.ssh(main_pid("haproxy")).stdout.strip() == master, "HAProxy restarted: not a reload"
    run = lab.run_pyinfra(base_inventory, "eagle3")
    assert run.returncode == 0 and run.changed == {}, run.changed
    assert started_at(vm_fleet) == before and current(vm_fleet) == releases


def test_gateway_answers_keys_models_and_health(vm_fleet, gateway):
    body = '{"model": "openai/gpt-oss-120b", "prompt": "hi", "max_tokens": 4}'
    assert _gateway_curl(gateway, "/v1/completions", None, body)[0] == 401  # no key: never reaches a Spark
    assert _gateway_curl(gateway, "/v1/completions", "sk-wrong", body)[0] == 401
    code, text = _gateway_curl(gateway, "/v1/completions", gateway_lab.KEY, body)
    assert code == 200 and json.loads(text)["choices"][0]["text"].strip(), text
    code, text = _gateway_curl(gateway, "/models/openai/gpt-oss-120b/v1/completions", gateway_lab.KEY, body)
    assert code == 200, text  # the path form (for bodies whose `model` comes after a long prompt)
    code, text = _gateway_curl(gateway, "/v1/completions", gateway_lab.KEY, body.replace("openai/gpt-oss-120b", "x/y"))
    assert code == 404, text
    code, text = _gateway_curl(gateway, "/v1/models", gateway_lab.KEY)
    assert code == 200 and [m["id"] for m in json.loads(text)["data"]] == ["openai/gpt-oss-120b"], text
    health = gateway.guest.ssh("curl -sS -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/healthz").stdout
    metrics = gateway.guest.ssh("curl -sS http://127.0.0.1:8404/metrics").stdout
    assert health == "200" and "haproxy_server_current_sessions" in metrics, (health, metrics[:300])


@pytest.mark.full
def test_a_spark_killed_mid_load_leaves_the_pool_within_the_bound(vm_fleet, gateway, base_inventory):
    victim = vm_fleet.guests[2]
    bound = leave_bound_sec(2000, 2)  # the defaults: gateway_check_inter_ms, gateway_check_fall
    offset = gateway_lab.clock_offset(gateway.guest)
    load = gateway_lab.start_load(gateway.guest, gateway.url, gateway_lab.KEY, concurrency=4, count=2000,
                                  seconds=300, pause=0.1, stream_every=1, max_tokens=120)
    time.sleep(8)  # four streams of ~2 s each, spread over the three Sparks by leastconn
    victim.ssh("docker kill specfleet-trtllm >/dev/null")
    killed = time.time()
    _wait_pool(gateway, {victim.name: "DOWN"}, seconds=bound + 30)
    left = time.time() - killed  # an upper bound: the last poll saw it UP before this
    time.sleep(5)  # requests after it left (a score at concurrency 4): none may fail
    load.stop()
    failed = load.failures()
    figure("gateway: a Spark's container killed mid-load: left the pool after / bound",
           f"{left:.1f} s (polled; an upper bound) / {bound:.1f} s")
    figure("gateway: ... client requests / failed (in flight on it when killed)",
           f"{load.summary['requests']} / {len(failed)}")
    assert left <= bound + 2.0, f"left the pool {left:.1f} s after the kill (bound {bound:.1f} s + 2 s polling)"
    assert len(failed) <= 4, failed  # at most the client's concurrency was in flight on it
    assert all(r["t0"] - offset < killed + 0.5 for r in failed), f"requests started after the kill failed: {failed}"
    # systemd restarts the container (RestartSec), and the agent keeps it out until a gate passes: the converge
    deadline = time.monotonic() + 120
    while victim.ssh("docker inspect -f '{{.State.Running}}' specfleet-trtllm", check=False).stdout.strip() != "true":
        assert time.monotonic() < deadline, "systemd did not restart the container"
        time.sleep(2)
    time.sleep(2 * 2.0 * 2)  # two rise intervals: it would be back by now if only /health counted
    assert not gateway_lab.pool(gateway.guest)[victim.name].startswith("UP"), "back in the pool without a gate"
    run = lab.run_pyinfra(serving_inventory(base_inventory), "eagle3", "--limit", victim.name)
    assert run.returncode == 0, run.output()[-3000:]
    _wait_pool(gateway, {g.name: "UP" for g in vm_fleet.guests})


@pytest.mark.full
def test_latency_through_the_gateway_against_direct(vm_fleet, gateway):
    opts = dict(concurrency=1, count=40, seconds=300, stream_every=0, max_tokens=16)
    direct = gateway_lab.run_load(vm_fleet.guests[0], "http://127.0.0.1:8000", **opts).summary
    through = gateway_lab.run_load(gateway.guest, gateway.url, gateway_lab.KEY, **opts).summary
    assert direct["failed"] == 0 and through["failed"] == 0, (direct, through)
    figure("gateway: p50 / p99 through the gateway vs direct to a Spark (40 sequential completions each)",
           f"{through['p50_s'] * 1000:.0f} / {through['p99_s'] * 1000:.0f} ms vs {direct['p50_s'] * 1000:.0f} / "
           f"{direct['p99_s'] * 1000:.0f} ms = {through['p50_s'] / direct['p50_s']:.2f}x / "
           f"{through['p99_s'] / direct['p99_s']:.2f}x")


@pytest.mark.full
def test_the_sparks_answer_only_the_gateways(vm_fleet, gateway):
    spark, peer = vm_fleet.guests[0], vm_fleet.guests[1]
    url = f"http://{spark.lan_address}:8001/health"
    assert gateway.guest.ssh(f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}' {url}").stdout == "200"
    refused = peer.ssh(f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}' {url}", check=False)
    assert refused.returncode != 0 and refused.stdout in ("", "000"), refused
    direct = peer.ssh(f"curl -sS -m 5 http://{spark.lan_address}:8000/health", check=False)
    assert direct.returncode != 0, direct  # the server itself listens on loopback only
    ssh_open = peer.ssh(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{spark.lan_address}/22' && echo open", check=False)
    assert ssh_open.stdout.strip() == "open", ssh_open  # other traffic is untouched


@pytest.mark.full
def _clocks(fleet) -> dict[str, str]:
    """Each Spark's clock now, as journalctl's --since/--until read it."""
    return {g.name: g.ssh("date -u '+%Y-%m-%d %H:%M:%S'").stdout.strip() for g in fleet.guests}


def _journal(guest, since: str, until: str | None = None) -> str:
    until_arg = f" --until '{until}'" if until else ""
    return guest.ssh(f"journalctl -q --no-pager -o cat -u specfleet-trtllm --since '{since}'{until_arg}").stdout


def _credentials_seen(guest, since: str, until: str | None = None) -> list[str]:
    return [line for line in _journal(guest, since, until).splitlines() if CREDENTIALS_SEEN in line]


def test_the_key_is_on_no_disk_and_reaches_no_spark(vm_fleet, gateway):
    """What reached each Spark: the trtllm-serve stand-in logs the name of every credential-like header a request
    carries (never its value), and none came through the gateway in this module (thousands of requests with the key,
    during the rollout, the rollback and the scenarios above), while a header sent to one directly is logged. Then
    the key itself: in no file and no journal of any guest."""
    for g in vm_fleet.guests:
        # but the window in which the reload test above took the rules out of the gateway's config
        windows = ((STATE["gateway_since"][g.name], STATE.get("forwarding_from", {}).get(g.name)),
                   (STATE.get("forwarding_until", {}).get(g.name), None))
        log = "".join(_journal(g, since, until) for since, until in windows if since)
        relayed = sum('"POST /v1/' in line for line in log.splitlines())
        seen = [line for line in log.splitlines() if CREDENTIALS_SEEN in line]
        figure(f"gateway: {g.name}: requests the stand-in logged / with a credential header", f"{relayed} / {len(seen)}")
        assert relayed > 0 and not seen, seen[:3]
    spark = vm_fleet.guests[0]
    spark.ssh("curl -fsS -m 10 -o /dev/null -H 'Authorization: Bearer not-a-key' http://127.0.0.1:8000/health")
    deadline = time.monotonic() + 60
    while CREDENTIALS_SEEN not in spark.ssh("journalctl -q --no-pager -o cat -u specfleet-trtllm -n 50").stdout:
        assert time.monotonic() < deadline, "the stand-in did not log a credential header sent to it directly"
        time.sleep(1)
    # the gateway's whole writable tree; the Sparks' too, but their image layers; the 4 guests searched at once
    # (each guest's vCPU is its own thread on the controller)
    def search(guest, skip: str) -> list[str]:
        # the key comes on stdin: on the command line, sudo would log it to the journal searched here
        return guest.ssh(f'k=$(cat); grep -rlsF -D skip {skip} -e "$k" /etc /var /tmp /root /home /run /usr/local '
                         '/opt; journalctl -q --no-pager -o cat | grep -cF -e "$k"', input=gateway_lab.KEY.encode(),
                         check=False, timeout=900).stdout.split()

    guests = ((gateway.guest, ""), *((g, "--exclude-dir=docker") for g in vm_fleet.guests))
    with ThreadPoolExecutor(len(guests)) as pool:
        found = dict(zip((g.name for g, _ in guests), pool.map(lambda gs: search(*gs), guests), strict=True))
    assert all(f == ["0"] for f in found.values()), f"the API key is in {found}"
    mode = gateway.guest.ssh("stat -c '%a %U' /etc/haproxy/specfleet-keys.map").stdout.strip()
    assert mode == "600 root", mode


@pytest.mark.full
def test_status_shows_each_spark_in_each_pool(vm_fleet, gateway, base_inventory):
    out = lab.run_specfleet("status", "inventory.py", inventory=serving_inventory(base_inventory))
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert f"{gateway_lab.GATEWAY}  gateway  ok  3/3 Spark(s) ready" in out.stdout, out.stdout
    for g in vm_fleet.guests:
        assert any(g.name in line and f"in pool: {gateway_lab.GATEWAY} ready" in line
                   for line in out.stdout.splitlines()), out.stdout


def test_without_the_gateway_the_sparks_serve_on_their_own(vm_fleet, gateway, base_inventory):
    """The gateway's last test: the gateway group goes (a converge removes the Sparks' side, restarting none), the
    cleanup deploy removes the gateway, and its guest stops (its checks cost the TCG Sparks CPU): the halting
    rollouts below and the later modules get a fleet as CI has it."""
    behind = serving_inventory(base_inventory)
    inv = gateway_lab.without_gateway(behind, vm_fleet.workdir / "alone.yml")
    before = started_at(vm_fleet)
    run = lab.run_pyinfra(inv, "eagle3")
    assert run.returncode == 0, run.output()[-3000:]
    assert started_at(vm_fleet) == before, "leaving the gateway restarted a Spark"
    for g in vm_fleet.guests:
        left = g.ssh("ls /etc/systemd/system /var/lib/specfleet | grep -E -- '-(gateway|agent)[.]|^gateways[.]json$|"
                     "^agent$|^started$|^specfleet-trtllm[.]service[.]d$'", check=False).stdout
        assert left == "", f"{g.name}: left behind: {left}"
        assert lab.guest_curl_completion(g)["choices"][0]["text"].strip()
    cleanup = lab.run_pyinfra(behind, "cleanup", "--limit", gateway_lab.GATEWAY)
    assert cleanup.returncode == 0, cleanup.output()[-3000:]
    gone = gateway.guest.ssh("dpkg -s haproxy >/dev/null 2>&1 && echo installed; ls /etc/haproxy 2>/dev/null",
                             check=False).stdout
    assert "installed" not in gone and "specfleet" not in gone, gone
    STATE["serving_inventory"] = inv
    specfleet_lab.down(gateway.workdir)


# ---- after the gateway left (--full) or right after the rollback (CI): rollouts that halt, and the lock ----------
@pytest.mark.full  # CI keeps the unit test of the same halt: tests/unit/test_rollout_halt.py
def test_bad_release_is_rolled_back_on_the_canary_and_halts(vm_fleet, base_inventory):
    lab.make_variant_in_guests(vm_fleet, "crash", BAD_TAG)
    inv_bad = lab.with_vars(serving_inventory(base_inventory), vm_fleet.workdir / "release-bad.yml", image=BAD_TAG)
    before, started = current(vm_fleet), started_at(vm_fleet)
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_bad)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    canary, *others = [g.name for g in vm_fleet.guests]
    assert "result: HALTED" in proc.stdout
    assert any(line.startswith(canary) and "rolled back" in line for line in proc.stdout.splitlines()), proc.stdout
    assert current(vm_fleet) == before, "every host serves its old release"
    now = started_at(vm_fleet)
    for h in others:
        assert now[h] == started[h], f"{h} was restarted although the rollout halted at the canary"
        assert any(line.startswith(h) and "not touched" in line for line in proc.stdout.splitlines())
    assert lab.guest_curl_completion(vm_fleet.guests[0])["choices"][0]["text"].strip()


@pytest.mark.full  # two reboots' worth of minutes: the --full tier
def test_guest_powered_off_mid_rollout_halts_and_rerun_completes(vm_fleet, base_inventory):
    inv_c = lab.with_vars(serving_inventory(base_inventory), vm_fleet.workdir / "release-c.yml",
                          extra_llm_api_options={"speculative_config": {"max_draft_len": 2}})
    canary, victim, last = vm_fleet.guests
    before = current(vm_fleet)
    # the lab's power cycle keeps the host's disk, identity, SSH endpoint and LAN address
    identity = victim.ssh("echo survives > /root/marker && sync && cat /etc/machine-id").stdout.strip()
    endpoint = (victim.ssh_host, victim.ssh_port)
    powered_off = threading.Event()

    def power_off_after_canary_switch():
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            out = canary.ssh("basename $(readlink /var/lib/specfleet/current)", check=False).stdout.strip()
            if out and out != before[canary.name]:
                victim.poweroff()
                powered_off.set()
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=power_off_after_canary_switch, daemon=True)
    watcher.start()
    proc = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,1", inventory=inv_c)
    watcher.join(timeout=60)
    assert powered_off.is_set()
    assert proc.returncode == 1 and "result: HALTED" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith(victim.name) and "unreachable" in line for line in lines), proc.stdout
    assert any(line.startswith(last.name) and "not touched" in line for line in lines), proc.stdout
    now = {g.name: g.ssh("basename $(readlink /var/lib/specfleet/current)").stdout.strip() for g in (canary, last)}
    assert now[canary.name] != before[canary.name] and now[last.name] == before[last.name]
    for g in (canary, last):  # nobody half-switched: both serve
        assert g.ssh("systemctl is-active specfleet-trtllm").stdout.strip() == "active"
        assert lab.guest_curl_completion(g)["choices"][0]["text"].strip()
    assert not victim.is_running()
    victim.poweroff()  # already off: a no-op
    victim.boot(wait=True)
    assert (victim.ssh_host, victim.ssh_port) == endpoint and victim.is_running()
    assert victim.ssh("cat /root/marker; cat /etc/machine-id").stdout.split() == ["survives", identity]
    assert f"inet {victim.lan_address}/24" in victim.ssh("ip -4 -o addr show dev eth1").stdout
    # the canary is already current: the two others switch as one batch (one gate's wait, not two in a row)
    rerun = lab.run_specfleet("rollout", "inventory.py", "deploys/eagle3.py", "--batches", "1,2", inventory=inv_c)
    assert rerun.returncode == 0 and "result: SUCCESS" in rerun.stdout, rerun.stdout + rerun.stderr[-2000:]
    final = current(vm_fleet)
    assert len(set(final.values())) == 1 and final[canary.name] == now[canary.name]
    STATE["serving_inventory"] = inv_c
