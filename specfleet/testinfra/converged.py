"""Checks of a converged specfleet host: access, secrets, files, models, config, unit, container, endpoint.

Collected through a project's tests/infra/test_converged.py (`from specfleet.testinfra.converged import *`)."""

from __future__ import annotations

import json

import pytest

from specfleet.constants import GB
from specfleet.fleet.settings import TIKTOKEN_FILES
from specfleet.host.layout import (
    DOCKER_UNIT,
    DRAFT_LINK,
    EARLYOOM_BIN,
    EARLYOOM_UNIT,
    NETPLAN_FILE,
    PAIR_USER,
    SSH_UNIT,
    SUDOERS_FILE,
    main_pid,
)
from specfleet.memory.render import (
    DOCKERD_OOM_SCORE_ADJ,
    EARLYOOM_AVOID,
    dockerd_oom_dropin,
    earlyoom_dropin,
    earlyoom_kib,
)
from specfleet.memory.rules import can_lower_scores, earlyoom_floor_gb, reserve_kb
from specfleet.pair.render import gate_command
from specfleet.serving.render import OOM_SCORE_ADJ, config_yaml, unit_text


def test_operators_in_docker_group_and_can_use_docker(spark):
    for user in spark.s.operator_users:
        assert "docker" in spark.host.user(user).groups
        # a fresh login session picks the group up; no sudo involved in the docker call (su itself needs root:
        # the suite may log in as an operator, e.g. the VM fleet's `spark` with _sudo)
        with spark.host.sudo():
            cmd = spark.host.run(f"su - {user} -c 'docker ps --format {{{{.Names}}}}'")
        assert cmd.rc == 0, cmd.stderr
        assert spark.s.serving_unit in cmd.stdout


def test_token_file_is_root_only(spark):
    f = spark.host.file(spark.plan.paths.token_file)
    assert f.exists and f.user == "root" and f.group == "root" and f.mode == 0o600
    d = spark.host.file(spark.s.secrets_dir)
    assert d.is_directory and d.mode == 0o700


def test_token_not_in_container_env_nor_unit(spark):
    with spark.host.sudo():
        token = spark.host.file(spark.plan.paths.token_file).content_string.strip()
        env = json.loads(spark.host.check_output(
            f"docker inspect --format '{{{{json .Config.Env}}}}' {spark.s.serving_unit}"))
        unit = spark.host.file(spark.plan.paths.unit_file).content_string
    assert token and not [e for e in env if token in e or e.startswith(("HF_TOKEN=", "HUGGING_FACE_HUB_TOKEN="))]
    assert token not in unit and "HF_HUB_OFFLINE=1" in env


def test_encodings_staged_with_expected_hashes(spark):
    if not spark.s.profile["tiktoken"]:
        pytest.skip(f"{spark.s.profile_name} does not use tiktoken encodings")
    for name in TIKTOKEN_FILES:
        f = spark.host.file(f"{spark.plan.paths.tiktoken}/{name}")
        assert f.exists and f.sha256sum == spark.s.tiktoken_sha256[name]


def test_models_complete_at_the_recorded_commit(spark):
    for role, model in spark.release["models"].items():
        repo_dir = spark.plan.paths.repo_dir(model["repo"])
        snap = f"{repo_dir}/snapshots/{model['commit']}"
        assert spark.host.file(snap).is_directory, snap
        listing = spark.host.check_output(
            f"cd {snap} && find -L . -type f -printf '%s\\n' | awk '{{n++; s+=$1}} END {{print n+0, s+0}}'").split()
        assert int(listing[0]) == model["files"] and int(listing[1]) == model["bytes"], (role, listing, model)
        if role == "target":
            assert spark.host.file(f"{repo_dir}/refs/main").content_string.strip() == model["commit"]
        else:
            draft = spark.host.file(spark.plan.paths.current_file(DRAFT_LINK))
            assert draft.is_directory
    # gpt-oss: only the root weights, never the original/ and metal/ copies
    if spark.release["models"]["target"]["repo"] == "openai/gpt-oss-120b":
        snap = spark.plan.paths.snapshot("openai/gpt-oss-120b", spark.release["models"]["target"]["commit"])
        assert not spark.host.file(f"{snap}/original").exists and not spark.host.file(f"{snap}/metal").exists


def test_hf_cache_ls_lists_the_models(spark):
    out = spark.host.check_output(f"{spark.plan.paths.venv}/bin/hf cache ls --cache-dir {spark.plan.paths.hub_cache} "
                                  "--format json")
    cached = {entry["repo_id"] for entry in json.loads(out)}
    for model in spark.release["models"].values():
        assert model["repo"] in cached, (model["repo"], cached)


def test_config_file_equals_render_output(spark):
    f = spark.host.file(spark.plan.paths.current_file(spark.s.engine.options_file))
    assert f.content_string == config_yaml(spark.s)


def test_unit_file_equals_render_output_enabled_and_active(spark):
    assert spark.host.file(spark.plan.paths.unit_file).content_string == unit_text(spark.s)
    svc = spark.host.service(spark.s.serving_unit)
    assert svc.is_enabled and svc.is_running


def test_container_runs_with_the_seed_flags(spark):
    with spark.host.sudo():
        info = json.loads(spark.host.check_output(f"docker inspect {spark.s.serving_unit}"))[0]
    hc = info["HostConfig"]
    assert info["State"]["Running"] and info["Config"]["Image"] == spark.s.image
    assert hc["IpcMode"] == "host" and hc["NetworkMode"] == "host" and hc["Init"] is True
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in hc["Ulimits"]}
    assert ulimits == {"memlock": (-1, -1), "stack": (67108864, 67108864)}  # what the unit asks docker for
    gpus = [r for r in (hc.get("DeviceRequests") or []) if ["gpu"] in r.get("Capabilities", [])]
    assert bool(gpus) == spark.s.gpus
    binds = hc["Binds"]
    assert binds and all(b.endswith(":ro") for b in binds), binds
    assert any(b.startswith(f"{spark.plan.paths.hf_home}:") for b in binds)
    assert hc["OomScoreAdj"] == OOM_SCORE_ADJ  # the kernel's OOM killer takes the serving container first
    # its cgroup is capped at MemTotal less the reserve (drop-caches computes it at each start), swap included where
    # the kernel accounts swap: without that, docker keeps the memory cap and stores MemorySwap -1 (moby's
    # verifyPlatformContainerResources: "Memory limited without swap")
    total_kb = int(spark.host.check_output("awk '/^MemTotal:/{print $2}' /proc/meminfo"))
    cap = (total_kb - reserve_kb(int(spark.s.memory_reserve_gb * GB))) * 1024
    with spark.host.sudo():
        swap_limit = spark.host.check_output("docker info --format '{{.SwapLimit}}'").strip() == "true"
    want = (cap, cap if swap_limit else -1)
    assert (hc["Memory"], hc["MemorySwap"]) == want, (hc["Memory"], hc["MemorySwap"], want, swap_limit)


def test_the_server_has_the_limits_it_asked_for(spark):
    """What the server's process really has (its /proc limits), not what docker reports it was asked: unlimited
    locked memory and a 64 MiB stack. A host whose own init has a finite locked-memory limit (a container host:
    nothing in it can raise that) cannot give it; the check is skipped there, saying so."""
    with spark.host.sudo():
        init = _limits(spark.host, "1")
        pid = spark.host.check_output(f"docker inspect -f '{{{{.State.Pid}}}}' {spark.s.serving_unit}").strip()
        server = _limits(spark.host, pid)
    if init["Max locked memory"][1] != "unlimited":
        pytest.skip(f"{spark.name}: the host's own locked-memory limit is {init['Max locked memory'][1]} bytes "
                    "(a container host): no process on it can get unlimited [lab ledger: memlock]")
    assert server["Max locked memory"] == ("unlimited", "unlimited"), server["Max locked memory"]
    assert server["Max stack size"] == ("67108864", "67108864"), server["Max stack size"]


def _limits(host, pid: str) -> dict[str, tuple[str, str]]:
    """/proc/PID/limits as {name: (soft, hard)}."""
    out = {}
    for line in host.check_output(f"cat /proc/{pid}/limits").splitlines()[1:]:
        name, (soft, hard) = line[:26].strip(), line[26:].split()[:2]
        out[name] = (soft, hard)
    return out


def test_memory_protection_serving_host_keeps_the_reserve_and_its_daemons_come_last(spark):
    """Unified memory (docs/memory.md): once the model is loaded, at least memory_reserve_gb stays available, the
    serving container's processes are the OOM killer's first choice, and sshd's listener and dockerd its last."""
    available = int(spark.host.check_output("awk '/^MemAvailable:/{print $2}' /proc/meminfo")) * 1024
    assert available >= spark.s.memory_reserve_gb * GB, (available, spark.s.memory_reserve_gb)
    with spark.host.sudo():
        # every process in the container: its init and server, and on a pair's worker the MPI daemon and rank that
        # the head's launch runs in it with `docker exec` (the container's figure must reach those too)
        served = spark.host.check_output(f"for p in $(docker top {spark.s.serving_unit} -eo pid | tail -n +2); do "
                                         "echo $p $(cat /proc/$p/oom_score_adj 2>/dev/null); done").splitlines()
        # the sshd listener and dockerd: their units' main processes (sessions are sshd children that come and go)
        daemons = spark.host.check_output(
            "; ".join(f"p=$({main_pid(unit)}); echo $(cat /proc/$p/comm) $(cat /proc/$p/oom_score_adj)"
                      for unit in (SSH_UNIT, DOCKER_UNIT))).split()
        dropin = spark.host.file(spark.plan.paths.dockerd_oom_dropin)
        assert dropin.exists and dropin.content_string == dockerd_oom_dropin()
        cap_bnd = spark.host.check_output("awk '/^CapBnd:/{print $2}' /proc/self/status").strip()
    adjs = [line.split()[1] for line in served if len(line.split()) == 2]  # a process may end between the two reads
    assert adjs and all(int(a) == OOM_SCORE_ADJ for a in adjs), served
    if not can_lower_scores(cap_bnd):
        pytest.skip(f"{spark.name}: no CAP_SYS_RESOURCE in the host's bounding set (a container host): sshd and "
                    f"dockerd cannot get a negative OOM score (they have {daemons}) [lab ledger: negative-oom-score]")
    # sshd's listener: OpenSSH's own -1000 (oom_adjust_setup); dockerd: the deploy's (memory/steps.py)
    assert daemons == ["sshd", "-1000", "dockerd", str(DOCKERD_OOM_SCORE_ADJ)], daemons


def test_earlyoom_watches_available_memory_with_the_deploys_floor(spark):
    """Unified memory (docs/memory.md): earlyoom runs with the drop-in's command line, so it ends the serving
    container while the floor is still available (a GB10's GPU allocations, which the container's cap does not hold,
    count there)."""
    floor = earlyoom_floor_gb(spark.s)
    if floor <= 0:
        pytest.skip("earlyoom_available_gb: 0 (earlyoom is left as it is)")
    term, kill = earlyoom_kib(spark.s)
    with spark.host.sudo():
        dropin = spark.host.file(spark.plan.paths.earlyoom_dropin)
        assert dropin.exists and dropin.content_string == earlyoom_dropin(spark.s)
        unit = spark.host.service(EARLYOOM_UNIT.removesuffix(".service"))
        assert unit.is_running and unit.is_enabled
        argv = spark.host.check_output(f"tr '\\0' ' ' < /proc/$({main_pid(EARLYOOM_UNIT)})/cmdline").split()
    assert argv[:3] == [EARLYOOM_BIN, "-M", f"{term},{kill}"], argv
    assert argv[argv.index("--avoid") + 1] == EARLYOOM_AVOID, argv  # systemd turned the drop-in's `$$` into `$`


def test_port_listening_on_the_configured_address(spark):
    spark.skip_a_worker()
    assert spark.host.socket(f"tcp://{spark.s.serve_host}:{spark.s.serve_port}").is_listening
    if spark.s.serve_host == "127.0.0.1":
        assert not spark.host.socket(f"tcp://0.0.0.0:{spark.s.serve_port}").is_listening


def _url(spark) -> str:
    return spark.release["url"]


def test_models_endpoint_lists_the_model(spark):
    spark.skip_a_worker()
    out = json.loads(spark.host.check_output(f"curl -fsS -m 30 {_url(spark)}/v1/models"))
    assert [m["id"] for m in out["data"]] == [spark.release["served_model"]]


def test_completion_returns_text(spark):
    spark.skip_a_worker()
    body = json.dumps({"model": spark.release["served_model"], "prompt": "Explain speculative decoding in one line.",
                       "max_tokens": 32})
    out = json.loads(spark.host.check_output(
        f"curl -fsS -m 300 {_url(spark)}/v1/completions -H 'Content-Type: application/json' -d '{body}'"))
    assert out["choices"][0]["text"].strip()


def test_the_gate_passed_for_the_current_release(spark):
    """The last switch's readiness gate passed for the release the host holds (a pair's worker: its side)."""
    assert spark.gate.get("release") == spark.release["id"] and spark.gate.get("result") == "passed", spark.gate
    assert (spark.gate.get("role") == "worker") == (spark.pair_role == "worker"), spark.gate


def test_a_pair_hosts_keys_link_and_login(spark):
    """A pair's head: both keys root 0600 and the worker's host key pinned; its worker: two keys authorized, behind
    `restrict,from=...` and each key's gate line (pair_files.gate_command) as its forced command, the MPI login
    without a password, and the sudoers rule root 0440; both: the link's netplan, root 0600."""
    if spark.pair_role is None:
        pytest.skip(f"{spark.name} serves alone (no pair)")
    p = spark.plan.paths
    with spark.host.sudo():
        if spark.pair_role == "head":
            for key in (p.pair_key, p.pair_switch_key):
                f = spark.host.file(key)
                assert f.exists and (f.user, f.mode) == ("root", 0o600), key
            assert spark.host.file(p.pair_switch_dir).mode == 0o700
            assert spark.host.file(p.pair_known_hosts).content_string.strip()
        else:
            lines = spark.host.file(p.pair_authorized_keys).content_string.splitlines()
            assert len(lines) == 2 and all(ln.startswith('restrict,from="') for ln in lines), lines
            commands = sorted(ln.split(',command="', 1)[1].split('"', 1)[0] for ln in lines)
            assert commands == sorted([gate_command(p), gate_command(p, switch=True)]), lines
            assert spark.host.user(PAIR_USER).exists and spark.host.user(PAIR_USER).password in ("*", "!", "!*")
            rule = spark.host.file(SUDOERS_FILE)
            assert (rule.user, rule.mode) == ("root", 0o440)
        netplan = spark.host.file(NETPLAN_FILE)
        assert netplan.exists and (netplan.user, netplan.mode) == ("root", 0o600)
