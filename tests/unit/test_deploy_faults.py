"""Fault paths and secrets on pyinfra's @fake connector: gate state, host jobs, token under sudo, cleanup."""

import json
import logging
import re

import pytest
from pyinfra.api import Config
from pyinfra.connectors.fake import FakeConnector

from specfleet.fleet.steps import jobs
from specfleet.plan import PlanError, build_plans, data_overrides
from specfleet.steps import cleanup, converge, rollback
from tests.unit.conftest import TOKEN
from tests.unit.fakehost import converged_responses, executed, make_plans, release_state_line, run_deploy


@pytest.fixture
def recorded(monkeypatch):
    """Every command's connector arguments (sudo, stdin) and every file upload, per host."""
    calls, uploads = [], []
    run, put = FakeConnector.run_shell_command, FakeConnector.put_file

    def run_shell_command(self, command, print_output=False, print_input=False, **arguments):
        calls.append((str(command if isinstance(command, str) else command.get_masked_value()), arguments))
        return run(self, command, print_output, print_input, **arguments)

    def put_file(self, filename_or_io, remote_filename, *args, **arguments):
        uploads.append((remote_filename, arguments))
        return put(self, filename_or_io, remote_filename, *args, **arguments)

    monkeypatch.setattr(FakeConnector, "run_shell_command", run_shell_command)
    monkeypatch.setattr(FakeConnector, "put_file", put_file)
    return calls, uploads


@pytest.mark.parametrize("gate", [{}, {"result": "running"}, {"result": "failed"}, {"result": "passed", "release": "r-000000000000"}],
                         ids=["never gated", "gate interrupted", "gate failed", "another release passed"])
def test_a_release_that_has_not_passed_its_gate_is_gated_again(gate):
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    gate = {"release": plan.release_id, **gate}
    state = run_deploy({"spark-01": plan}, converge, "eagle3", responses=lambda p: converged_responses(p, gate=gate))
    cmds = executed(state)["spark-01"]
    assert [c for c in cmds if f"job start activate:{plan.release_id}" in c], cmds
    assert not [c for c in cmds if "fetch-model --repo" in c or "docker pull" in c]


@pytest.fixture(autouse=True)
def _info_logs(caplog):
    caplog.set_level(logging.INFO, logger="pyinfra")


def test_failed_job_fails_the_host_with_its_message_and_log(caplog):
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    failed = json.dumps({"id": "j1", "key": "activate", "state": "failed", "exit": 1,
                         "message": "specfleet-host: r-x failed its readiness gate (smoke); rolled back to r-y, which is serving",
                         "log_tail": "last journal lines\nERROR: model load"})
    state = run_deploy({"spark-01": plan}, converge, "eagle3",
                       responses=lambda p: {**converged_responses(p, current="r-000000000000", release_missing=True),
                                            "job status": failed})
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]
    text = caplog.text
    assert "rolled back to r-y, which is serving" in text and "ERROR: model load" in text
    assert not [c for c in executed(state)["spark-01"] if " prune " in c], "no prune after a failed activation"


def test_a_running_job_with_the_same_key_is_attached_to_not_started_twice(caplog):
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    state = run_deploy({"spark-01": plan}, converge, "eagle3",
                       responses=lambda p: {**converged_responses(p, gate={"release": p.release_id, "result": "running"}),
                                            "job start": json.dumps({"id": "j7", "state": "attached"})})
    assert not state.failed_hosts
    assert "attached to job j7" in caplog.text


def test_another_running_job_is_waited_for(monkeypatch, caplog):
    monkeypatch.setattr(jobs, "POLL_EVERY", 0)
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    import itertools
    answers = itertools.chain([json.dumps({"id": "j0", "state": "busy", "key": "fetch:x@y"})],
                              itertools.repeat(json.dumps({"id": "j1", "state": "started"})))
    original = FakeConnector._lookup_response

    def lookup(self, command):
        if "job start" in command:
            from pyinfra.connectors.util import CommandOutput, OutputLine
            return True, CommandOutput([OutputLine("stdout", next(answers))])
        return original(self, command)

    monkeypatch.setattr(FakeConnector, "_lookup_response", lookup)
    state = run_deploy({"spark-01": plan}, converge, "eagle3",
                       responses=lambda p: converged_responses(p, gate={"release": p.release_id, "result": "failed"}))
    assert not state.failed_hosts
    assert "waiting for the host's running job j0 (fetch:x@y) to end" in caplog.text
    cmds = executed(state)["spark-01"]
    assert any("job status j0" in c for c in cmds) and any("job status j1" in c for c in cmds)


def test_progress_lines():
    fetch = {"key": "f", "progress": {"kind": "fetch", "repo": "openai/gpt-oss-120b", "commit": "a" * 40, "bytes_done": 13e9,
                                      "bytes_total": 65e9, "files_done": 3, "files_total": 15, "rate_bps": 110e6, "eta_s": 470}}
    assert jobs.progress_line(fetch, 12) == ("fetch openai/gpt-oss-120b@aaaaaaaaaaaa: 13.00/65.00 GB (20%, 3/15 files), "
                                             "110.0 MB/s, ETA 470s")
    gate = {"progress": {"kind": "gate", "release": "r-1", "phase": "health", "elapsed": 42.4, "timeout": 1800,
                         "unit": "active", "last": "/health: [Errno 111] Connection refused"}}
    assert jobs.progress_line(gate, 50) == "gate r-1: health 42s/1800s, unit active (/health: [Errno 111] Connection refused)"
    pull = {"progress": {"kind": "pull", "ref": "10.1.0.5:5000/nvcr.io/x@sha256:ab", "bytes_done": 3.2e9,
                         "bytes_total": 21.3e9, "rate_bps": 110.2e6, "eta_s": 164, "layers_done": 12, "layers_total": 95}}
    assert jobs.progress_line(pull, 30) == ("pull 10.1.0.5:5000/nvcr.io/x@sha256:ab: 3.20/21.30 GB (15%, 12/95 layers), "
                                            "110.2 MB/s, ETA 164s")
    fetch_image = {"progress": {"kind": "image-fetch", "ref": "nvcr.io/x@sha256:ab", "bytes_done": 0,
                                "bytes_total": 21.3e9, "rate_bps": 0, "eta_s": None, "done": 0, "total": 1}}
    assert jobs.progress_line(fetch_image, 3) == "image-fetch nvcr.io/x@sha256:ab: 0.00/21.30 GB (0%, 0/1 images), 0.0 MB/s, ETA ?"
    assert jobs.progress_line({"key": "prune", "progress": {}}, 31.2) == "prune: running for 31s"


@pytest.mark.parametrize("how", ["_sudo data", "--sudo flag"])
def test_token_travels_on_stdin_under_sudo_and_is_never_uploaded(recorded, how):
    calls, uploads = recorded
    host_vars = {"_sudo": True} if how == "_sudo data" else {}
    plans = make_plans({"spark-01": host_vars}, "eagle3")
    for plan in plans.values():
        plan.connection = dict(host_vars)
    token_path = plans["spark-01"].paths.token_file
    state = run_deploy(plans, converge, "eagle3", config=Config(SUDO=how == "--sudo flag"),
                       responses=lambda p: converged_responses(p, files_missing=[token_path]))
    assert not state.failed_hosts
    writes = [(c, a) for c, a in calls if ".hf_token.tmp" in c]
    assert len(writes) == 1
    command, arguments = writes[0]
    assert arguments.get("_sudo") is True and arguments.get("_stdin") == TOKEN + "\n"
    assert TOKEN not in command and "umask 077" in command and command.count("/etc/specfleet/") >= 2
    assert not [u for u in uploads if "token" in u[0]], "the token is never a file upload (staged outside the secrets dir)"
    assert not [c for c, _ in calls if TOKEN in c]


def test_dropping_the_token_removes_it_from_the_host(monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    plan = make_plans({"spark-01": {"hf_token_required": False}}, "eagle3")["spark-01"]
    assert plan.settings.hf_token is None
    token_path = plan.paths.token_file
    lines = converged_responses(plan)
    status_key = next(k for k in lines if not isinstance(k, str) and "export DATA" in k.pattern)
    lines[status_key] = lines[status_key] + [f"file\tfile|600|root|root|{'0' * 64}\t{token_path}"]
    lines[re.compile(rf"stat -c .* {re.escape(token_path)} 2>")] = (
        f"user=root group=root mode=-rw------- atime=0 mtime=0 ctime=0 size=1 '{token_path}'")
    state = run_deploy({"spark-01": plan}, converge, "eagle3", responses=lambda p: lines)
    assert any(f"rm -f {token_path}" in c for c in executed(state)["spark-01"])


def test_cleanup_purge_on_a_converged_host_removes_everything_incl_the_token():
    plan = make_plans({"spark-01": {"purge_models": True}}, None)["spark-01"]
    p = plan.paths

    def stat(path, kind):
        return re.compile(rf"stat -c .* {re.escape(path)} 2>"), f"user=root group=root mode={kind} atime=0 mtime=0 ctime=0 size=1 '{path}'"

    responses = {"export DATA SVC": ["active\tinactive", "enabled\tdisabled", "container\tfalse"]}
    for path in (p.hf_home, p.drafts, p.releases, p.tiktoken, p.jobs):
        responses.__setitem__(*stat(path, "drwxr-xr-x"))
    for path in (p.previous, p.gate_file, p.token_file):
        responses.__setitem__(*stat(path, "-rw-------"))
    responses[re.compile(rf"stat -c .* {re.escape(p.current)} 2>")] = (
        f"user=root group=root mode=lrwxrwxrwx atime=0 mtime=0 ctime=0 size=1 '{p.current}' -> 'releases/r-1'")
    state = run_deploy({"spark-01": plan}, cleanup, responses=lambda _: responses)
    assert not state.failed_hosts
    cmds = "\n".join(executed(state)["spark-01"])
    for path in (p.hf_home, p.releases, p.jobs):
        assert f"rm -rf {path}" in cmds
    for path in (p.current, p.previous, p.gate_file, p.token_file):
        assert f"rm -f {path}" in cmds, path


def test_rollback_to_from_the_pyinfra_command_line_is_used_and_validated(fleet_file):
    from specfleet.fleet.inventory import load_inventory
    path = fleet_file("all:\n  hosts:\n    spark-01:\n")
    argv = ["pyinfra", "inventory.py", "deploys/rollback.py", "--data", "rollback_to=r-0123456789ab"]
    plans = build_plans(load_inventory(path), None, resolve=False, overrides=data_overrides(argv))
    assert plans["spark-01"].settings.rollback_to == "r-0123456789ab"
    with pytest.raises(PlanError) as exc:
        build_plans(load_inventory(path), None, resolve=False, overrides=data_overrides(["pyinfra", "--data=rollback_to=latest"]))
    assert exc.value.lines == ["spark-01: rollback_to: 'latest' has characters that are not allowed here"] or \
        exc.value.lines[0].startswith("spark-01: rollback_to: ")
    state = run_deploy(plans, rollback, responses=lambda p: {
        "export DATA SVC": [release_state_line(current="r-bbbbbbbbbbbb", previous="r-cccccccccccc",
                                               releases=["r-0123456789ab", "r-bbbbbbbbbbbb", "r-cccccccccccc"]),
                            "active\tactive"]})
    cmds = executed(state)["spark-01"]
    assert any("activate r-0123456789ab --revert" in c for c in cmds), cmds
    assert not any("r-cccccccccccc --revert" in c for c in cmds)
    assert not any("--rollback" in c for c in cmds)  # its host tool is not the current one: it predates the flag


def test_a_release_file_emptied_by_a_power_loss_is_written_again():
    """release.json's content is not known in advance (it records its creation time), but an empty one (a guest
    powered off right after the stage) is damaged: the next run writes it again instead of switching to it."""
    from specfleet.fleet.status import EMPTY_SHA256
    from specfleet.fleet.steps.state import wanted_files
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    rj = f"{plan.paths.releases}/{plan.release_id}/release.json"
    assert rj in wanted_files(plan)
    lines = converged_responses(plan, current="r-000000000000")
    status_key = next(k for k in lines if not isinstance(k, str) and "export DATA" in k.pattern)
    lines[status_key] = [ln for ln in lines[status_key] if not ln.endswith("\t" + rj)] + [f"file\tfile|644|root|root|{EMPTY_SHA256}\t{rj}"]
    state = run_deploy({"spark-01": plan}, converge, "eagle3", responses=lambda p: lines)
    assert any(name.startswith("Converge | Release | Stage release ") and "release.json" in name
               for name in _op_names(state)), _op_names(state)


def _op_names(state):
    return [", ".join(state.get_op_meta(h).names) for h in state.get_op_order()]


@pytest.mark.parametrize("cli", [True, False])
@pytest.mark.parametrize("gateways", [True, False])
def test_behind_gateways_the_rollback_returns_one_spark_after_the_other_in_reverse_inventory_order(gateways, cli):
    """All at once, every Spark of a model would drain together (the gateways' clients would get 503s): behind
    gateways the switch back is one operation per Spark, each run to its end before the next, from the last Spark of
    the inventory to the first (the rollout's order backwards); without them, one operation on every host at once.
    Both as the pyinfra command line orders operations and as its Python API does."""
    sparks = {f"spark-0{i}": {"ssh_hostname": f"10.0.0.{i + 1}"} for i in (1, 2, 3)}
    fleet = dict(sparks)
    if gateways:
        serving = {h: {**v, "serves": "eagle3"} for h, v in sparks.items()}
        # a gateway amid the Sparks: not one of them
        fleet = {"spark-01": serving["spark-01"], "gw-1": {"ssh_hostname": "10.0.0.1"},
                 "spark-02": serving["spark-02"], "spark-03": serving["spark-03"]}
    plans = make_plans(fleet, None, groups={"gateway": ["gw-1"]} if gateways else None)
    state = run_deploy(plans, rollback, cli=cli, responses=lambda p: {"exit 1": {"success": False}} if p.is_gateway
                       else {"export DATA SVC": [release_state_line(current="r-bbbbbbbbbbbb", previous="r-cccccccccccc",
                                                                    releases=["r-bbbbbbbbbbbb", "r-cccccccccccc"]),
                                                 "active\tactive"]})
    switch = [h for h in state.get_op_order() if "Switch back to release" in ", ".join(state.get_op_meta(h).names)]
    hosts = [sorted(x.name.removeprefix("@fake/") for x in state.inventory if op in state.ops[x]) for op in switch]
    if gateways:
        assert hosts == [["spark-03"], ["spark-02"], ["spark-01"]], hosts
    else:
        assert hosts == [["spark-01", "spark-02", "spark-03"]], hosts
    assert not any(state.get_op_meta(op).global_arguments["_serial"] for op in switch)
    assert not state.failed_hosts, "a gateway host has no release to return to: the rollback leaves it alone"
    assert all(any("activate r-cccccccccccc --revert" in c for c in cmds)
               for h, cmds in executed(state).items() if h.startswith("spark")), executed(state)


def test_behind_gateways_a_spark_that_fails_its_switch_back_leaves_the_others_to_go_on():
    """The rollback's job reverts a Spark whose target fails its gate (`activate --revert`); the operation fails on
    that host, and the Sparks after it in the rollback's order still switch back."""
    fleet = {"gw-1": {"ssh_hostname": "10.0.0.1"},
             **{f"spark-0{i}": {"ssh_hostname": f"10.0.0.{i + 1}", "serves": "eagle3"} for i in (1, 2, 3)}}
    plans = make_plans(fleet, None, groups={"gateway": ["gw-1"]})
    failed_job = {"job status": '{"id": "j1", "key": "k", "state": "failed", "exit": 1}'}
    state = run_deploy(plans, rollback, cli=True, responses=lambda p: {"exit 1": {"success": False}} if p.is_gateway
                       else {"export DATA SVC": [release_state_line(current="r-bbbbbbbbbbbb", previous="r-cccccccccccc",
                                                                    releases=["r-bbbbbbbbbbbb", "r-cccccccccccc"]),
                                                 "active\tactive"],
                             **(failed_job if p.connection.get("ssh_hostname") == "10.0.0.4" else {})})
    assert sorted(h.name for h in state.failed_hosts) == ["@fake/spark-03"]
    assert all(any("activate r-cccccccccccc --revert" in c for c in executed(state)[h]) for h in ("spark-01", "spark-02"))


def test_a_job_is_followed_with_waiting_reads_and_an_older_host_tool_is_polled(monkeypatch, caplog):
    """Each status read waits on the host (`job status ID --wait S`), so one SSH command hears the job's end at once;
    a host tool from before that option (a rollback or bench before the next converge updates it) answers with
    argparse's error, and the controller reads it again without the option, every POLL_EVERY seconds."""
    from pyinfra.connectors.util import CommandOutput, OutputLine
    monkeypatch.setattr(jobs, "POLL_EVERY", 0)
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    original = FakeConnector._lookup_response
    for old_tool in (False, True):
        def lookup(self, command, old_tool=old_tool):
            if old_tool and "job status" in command and "--wait" in command:
                return False, CommandOutput([OutputLine("stderr", "specfleet-host: error: unrecognized arguments: --wait 10")])
            return original(self, command)

        monkeypatch.setattr(FakeConnector, "_lookup_response", lookup)
        state = run_deploy({"spark-01": plan}, converge, "eagle3",
                           responses=lambda p: converged_responses(p, current="r-000000000000", release_missing=True))
        assert not state.failed_hosts, caplog.text
        reads = [c for c in executed(state)["spark-01"] if "job status j1" in c]
        assert reads and reads[0].endswith(f"job status j1 --wait {jobs.PROGRESS_EVERY:g}"), reads
        assert any(c.endswith("job status j1") for c in reads) == old_tool, reads
