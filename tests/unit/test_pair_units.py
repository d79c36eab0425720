"""A pair's units as rendered (the head's job that starts, gates and reverts both is
tests/unit/test_pair_switch.py's, and tests/vm/test_pair.py runs it on two guests): the head's container runs the MPI launch with the pair's directory
read-only and the worker's login and port in its environment; the worker's container holds its side up, with the
same model mounts and no MPI key. Read back with the reference parser of systemd's quoting (test_quoting.py) and
with systemd-analyze; a single Spark's unit is unchanged (test_golden_render.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from specfleet.engines.command import serve_args
from specfleet.host.layout import PAIR_AGENT
from specfleet.pair.launch import RANK_COMMAND
from specfleet.serving.render import unit_text
from tests.unit.test_pair_trust import _plans
from tests.unit.test_quoting import exec_line

PAIR_ONLY = [("-v", "/var/lib/specfleet/pair:/opt/specfleet-pair:ro"), ("-e", "SPECFLEET_PAIR_USER=specfleet-mpi"),
             ("-e", "SPECFLEET_PAIR_PORT=22")]  # the head's alone


def _units():
    plans = _plans()
    return {h: (p.settings, unit_text(p.settings)) for h, p in plans.items()}


def test_the_heads_unit_runs_the_mpi_launch_with_the_pair_directory_read_only():
    s, unit = _units()["spark-1"]
    argv = exec_line(unit, "ExecStart")
    image = argv.index(s.image)
    docker, command = argv[:image], argv[image + 1:]
    for flag, value in PAIR_ONLY:
        assert docker[docker.index(value) - 1] == flag, value
    assert command[:2] == ["mpirun", "--allow-run-as-root"]
    assert command[command.index("plm_rsh_agent") + 1] == PAIR_AGENT
    launch = command.index(RANK_COMMAND[0])
    assert command[launch:launch + len(RANK_COMMAND)] == RANK_COMMAND  # systemd hands bash the script unchanged
    assert command[launch + len(RANK_COMMAND):] == ["trtllm-serve", *serve_args(s)]
    assert "--tp_size" in command and not [a for a in docker if "mpi_key" in a or ".ssh" in a]


def test_the_workers_unit_holds_its_container_up_with_the_models_and_no_key():
    units = _units()
    (head, head_unit), (worker, worker_unit) = units["spark-1"], units["spark-2"]
    argv = exec_line(worker_unit, "ExecStart")
    image = argv.index(worker.image)
    assert argv[image + 1:] == ["sleep", "infinity"]
    # the worker's own copy of the agent at the path mpirun forwards (orted checks it exists), no key, read-only
    agent = argv.index(f"/var/lib/specfleet/pair/pair-agent:{PAIR_AGENT}:ro")
    assert argv[agent - 1] == "-v"
    argv = argv[:agent - 1] + argv[agent + 1:]
    image -= 2
    head_argv = exec_line(head_unit, "ExecStart")
    head_docker = head_argv[:head_argv.index(head.image)]
    for _flag, value in PAIR_ONLY:  # the head's docker arguments without the pair's mount and environment
        i = head_docker.index(value)
        head_docker = head_docker[:i - 1] + head_docker[i + 1:]
    # the same container otherwise: name, GPUs, host network and IPC, the model, draft and config mounts
    assert argv[:image] == head_docker
    assert not {value for _, value in PAIR_ONLY} & set(argv)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_real_systemd_parses_both_units_without_warnings(tmp_path):
    for host, (s, unit) in _units().items():
        path = tmp_path / f"{host}-{s.serving_unit}.service"
        path.write_text(unit)
        out = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
        assert not [line for line in (out.stdout + out.stderr).splitlines() if f"{path}:" in line], out.stderr


def test_the_heads_release_covers_the_workers_and_names_what_its_switch_needs():
    """The pair serves one release, the head's: its release.json names the worker's release and how the head's job
    reaches the worker (pair/host/pair_switch.py), and its id changes when the worker's does, even with its own files
    unchanged (a change of the worker's unit restarts the pair as one)."""
    from specfleet.host.layout import PAIR_USER
    from specfleet.pair.render import link_ip

    plans = _plans()
    head, worker = plans["spark-1"], plans["spark-2"]
    assert head.release_record("t")["pair"] == {"role": "head", "name": "pair_a", "worker": {
        "host": "spark-2", "address": link_ip(worker.settings.pair_link_addresses[0]), "port": 22,
        "login": PAIR_USER, "release": worker.release_id}}
    assert worker.release_record("t")["pair"] == {"role": "worker", "name": "pair_a", "head": "spark-1", "keep_releases": 5}
    head_id, head_unit, worker_id = head.release_id, head.rendered.unit, worker.release_id
    worker.settings = worker.settings.model_copy(update={"container_env": {"NCCL_DEBUG": "INFO"}})  # the worker's alone
    assert worker.release_id != worker_id and head.rendered.unit == head_unit
    assert head.release_id != head_id and head.release_record("t")["pair"]["worker"]["release"] == worker.release_id


def test_the_activate_step_starts_the_pairs_one_job_on_the_head_and_none_on_the_worker():
    """Both hosts serve another release: the head's activate job switches both (pair/host/pair_switch.py), so the
    worker's converge stages its release and starts nothing; a worker's release refuses a plain activate anyway."""
    from specfleet.serving.steps.service import activate
    from tests.unit.fakehost import SPECFLEET_FACT, executed, run_deploy, status_lines

    plans = _plans()
    state = run_deploy(plans, activate, responses=lambda p: {SPECFLEET_FACT: status_lines(p, current="r-0123456789ab")})
    assert not state.failed_hosts
    head, worker = executed(state)["spark-1"], executed(state)["spark-2"]
    assert [c for c in head if f"activate {plans['spark-1'].release_id} --revert --prune" in c]
    assert not [c for c in worker if " activate " in c or " prune " in c], worker


def test_releases_lists_a_pair_once_under_its_head_with_its_workers_release(fleet_file, monkeypatch, tmp_path):
    from click.testing import CliRunner

    from specfleet.cli import main
    from specfleet.fleet import run as runner
    from tests.unit.test_pair_fleet import _fleet

    fleet_file(_fleet(pair_more="      vars: {serves: qwen3_eagle3_pair}\n"), lock=False)
    (tmp_path / "inventory.py").write_text("")
    monkeypatch.chdir(tmp_path)
    head_rec = {"id": "r-h", "created": "2026-11-25T00:00:00Z", "profile": "qwen3_eagle3_pair", "image": "img",
                "models": {}, "pair": {"role": "head", "worker": {"host": "spark-2", "release": "r-w"}}}
    statuses = {"spark-1": {"current": "r-h", "active": "active", "releases": [head_rec],
                            "gate": {"release": "r-h", "result": "passed", "at": "t"}},
                "spark-2": {"current": "r-w", "active": "active", "releases": [{"id": "r-w", "models": {}}],
                            "gate": {"release": "r-w", "result": "passed", "role": "worker"}}}
    monkeypatch.setattr(runner, "read_statuses", lambda plans, hosts: {h: statuses[h] for h in hosts})
    out = CliRunner().invoke(main, ["releases", "inventory.py"]).output.splitlines()
    assert [line.split(":")[0] for line in out if not line.startswith(" ")] == ["spark-1"], out
    assert out[1].split()[:2] == ["*", "r-h"] and out[1].endswith("worker r-w"), out
    assert out[2] == "  worker spark-2: holds r-w (its side passed), service active", out


def test_a_rollout_refuses_one_host_of_a_pair_before_anything_changes():
    from specfleet.serving.run.rollout import lone_pair_hosts

    plans = _plans()
    assert lone_pair_hosts(plans, ["spark-1", "spark-2"]) == []
    assert lone_pair_hosts(plans, ["spark-2"]) == [
        "spark-2: pair_a: --limit names spark-2 without its pair's spark-1 (a pair rolls out as one: name both, "
        "or the group pair_a)"]


def test_rollback_leaves_a_worker_to_its_heads_job_and_a_worker_change_is_named_as_such():
    from specfleet.serving.steps.rollback import rollback
    from specfleet.serving.steps.service import _what_changed
    from tests.unit.fakehost import SPECFLEET_FACT, executed, run_deploy, status_lines

    plans = _plans()
    old = {p: f"r-00000000000{i}" for i, p in enumerate(plans)}
    state = run_deploy(plans, rollback, responses=lambda p: {SPECFLEET_FACT: status_lines(
        p, previous=old[p.settings.host], releases=[p.release_id, old[p.settings.host]])})
    assert not state.failed_hosts
    head, worker = executed(state)["spark-1"], executed(state)["spark-2"]
    # --rollback: its head leaving the pair's release asks the worker to serve alone again (pair_switch.after_rollback)
    assert [c for c in head if f"activate {old['spark-1']} --revert --rollback" in c], head
    assert not [c for c in worker if " activate " in c], worker
    # the head serves a release whose worker release differs from the plan's: the switch reason says so
    served = plans["spark-1"].release_record("t") | {"id": "r-0123456789ab"}
    served["pair"] = {**served["pair"], "worker": {**served["pair"]["worker"], "release": "r-00000000abcd"}}
    assert f"the pair's worker release r-00000000abcd -> {plans['spark-2'].release_id}" in _what_changed(
        plans["spark-1"], served)
