"""deploys/gateway.py on pyinfra's @fake connector: what the gateway deploy does to a gateway host in each situation
(fresh, converged, keys changed, config changed, bad keys, an engine without Lua), and that it never touches a
Spark or puts a key anywhere."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from specfleet.gateway.keys import gateway_secrets
from specfleet.gateway.render import backends, gateway_files, gateway_options
from specfleet.gateway.steps.gateways import LAYOUT, SECRET, loaded_stamp
from specfleet.host.layout import GatewayLayout
from specfleet.steps import gateway
from tests.unit.fakehost import changed_ops, executed, fake_run_on, make_plans, run_deploy

KEY = "sk-specfleet-unit-key-0123456789"
FLEET = {"gw-1": {"ssh_hostname": "10.0.0.1"},
         "spark-a": {"ssh_hostname": "10.0.0.2", "serves": "eagle3"},
         "spark-b": {"ssh_hostname": "10.0.0.3", "serves": "draft_target"}}
FEATURES = "-51DEGREES +LUA +OPENSSL +PROMEX +SYSTEMD"


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    monkeypatch.setenv("SPECFLEET_API_KEYS", f"ci {KEY}\n")


def _plans(**gw_vars):
    return make_plans({**FLEET, "gw-1": {**FLEET["gw-1"], **gw_vars}}, None, groups={"gateway": ["gw-1"]})


def _status(plan, keys=None, *, haproxy="2.8.5-1ubuntu3", features=FEATURES, active="active", files=None,
            loaded=True) -> list:
    """The status read of a gateway host that has `files` (default: what `plan` wants, loaded by HAProxy)."""
    s = plan.settings
    wanted = gateway_files(gateway_options(s), backends(s.gateway_backends), keys or {"ci": KEY}, GatewayLayout())
    files = dict(wanted if files is None else files)
    if loaded and files:
        files[LAYOUT.loaded_stamp] = loaded_stamp(files)
    lines = [f"haproxy\t{haproxy}", f"features\t{features}", f"active\t{active}", "enabled\tenabled", "admin\tyes",
             "dpkg_busy\t"]
    for path, content in files.items():
        mode = "600" if path in SECRET else "644"
        lines.append(f"file\t{mode}|root|root|{hashlib.sha256(content.encode()).hexdigest()}\t{path}")
    return lines


def _run(plans, status_lines):
    state = run_deploy(plans, gateway, responses=lambda p: {"gateway.GatewayStatus": status_lines(p),
                                                            "exit 1": {"success": False}} if p.is_gateway else {})
    names = {h: [n.rsplit(" | ", 1)[-1] for n in ops] for h, ops in changed_ops(state).items()}
    return state, names, executed(state)


def test_a_fresh_gateway_gets_haproxy_its_files_a_checked_config_and_a_start():
    plans = _plans()
    state, names, cmds = _run(plans, lambda p: _status(p, haproxy="", features="", active="inactive", files={}))
    ops = names["gw-1"]
    assert ops[0].startswith("haproxy from the distribution"), ops
    assert f"Write {LAYOUT.keys_map}.specfleet-new (root-only, from stdin)" in ops
    assert f"Write {LAYOUT.models_map}.specfleet-new" in ops
    assert ops[-3:] == [f"Write {LAYOUT.config}.specfleet-check", "Check the new files with haproxy -c, then install "
                        "them (5)", "Enable and start haproxy"], ops
    text = "\n".join(cmds["gw-1"])
    assert (f"haproxy -c -q -f {LAYOUT.config}.specfleet-check && mv -f {LAYOUT.config}.specfleet-new "
            f"{LAYOUT.config} && mv -f {LAYOUT.models_map}.specfleet-new {LAYOUT.models_map}") in text
    assert "umask 077" in text and "chmod 600" in text  # the key map: root-only from its first byte
    assert KEY not in text  # the key itself goes nowhere, not even hashed on a command line
    assert names["spark-a"] == names["spark-b"] == [] and cmds["spark-a"] == cmds["spark-b"] == []


def test_a_converged_gateway_is_only_read():
    plans = _plans()
    state, names, cmds = _run(plans, _status)
    assert names["gw-1"] == [] and not state.failed_hosts
    assert len(cmds["gw-1"]) == 1 and "gateway.GatewayStatus" in cmds["gw-1"][0]


def test_a_revoked_and_an_added_key_sync_the_running_map_without_a_reload(monkeypatch):
    plans = _plans()
    monkeypatch.setenv("SPECFLEET_API_KEYS", "other sk-specfleet-unit-other-key-987654\n")
    state, names, cmds = _run(plans, _status)  # the host still has the map with `ci`
    assert names["gw-1"] == [f"Write {LAYOUT.keys_map}.specfleet-new (root-only, from stdin)",
                             "Sync the running API-key map from the new file (no reload), then install it"], names
    text = "\n".join(cmds["gw-1"])
    assert ("sync-map /etc/haproxy/specfleet-keys.map --from /etc/haproxy/specfleet-keys.map.specfleet-new && mv -f "
            "/etc/haproxy/specfleet-keys.map.specfleet-new /etc/haproxy/specfleet-keys.map") in text
    assert "systemctl reload" not in text


def test_a_new_spark_is_a_checked_config_and_a_reload_that_keeps_the_drains():
    old = _plans()
    new = make_plans({**FLEET, "spark-c": {"ssh_hostname": "10.0.0.4", "serves": "eagle3"}}, None,
                     groups={"gateway": ["gw-1"]})
    state, names, cmds = _run(new, lambda p: _status(old["gw-1"]))
    ops = names["gw-1"]
    assert ops[-1] == "Save the servers' states, then reload haproxy (no connection dropped)", ops
    assert "Check the new files with haproxy -c, then install them (1)" in ops
    text = "\n".join(cmds["gw-1"])
    assert text.index("save-state /var/lib/haproxy/server-state") < text.index("systemctl reload haproxy")


def test_a_gateway_that_forwards_credentials_gets_the_rules_by_a_checked_reload_and_no_spark_changes():
    """A running gateway whose config lacks the rules that remove the client's credentials: the new config is
    proven by `haproxy -c`, installed, and HAProxy reloads (no start, no restart); the Sparks are not touched."""
    plans = _plans()
    s = plans["gw-1"].settings
    wanted = gateway_files(gateway_options(s), backends(s.gateway_backends), {"ci": KEY}, GatewayLayout())
    forwarding = "".join(line for line in wanted[LAYOUT.config].splitlines(True) if "del-header" not in line)
    assert forwarding != wanted[LAYOUT.config]
    state, names, cmds = _run(plans, lambda p: _status(p, files={**wanted, LAYOUT.config: forwarding}))
    assert names["gw-1"] == [f"Write {LAYOUT.config}.specfleet-new", f"Write {LAYOUT.config}.specfleet-check",
                             "Check the new files with haproxy -c, then install them (1)",
                             "Save the servers' states, then reload haproxy (no connection dropped)"], names
    text = "\n".join(cmds["gw-1"])
    assert "systemctl reload haproxy" in text and "restart" not in text and "systemctl start" not in text
    assert names["spark-a"] == names["spark-b"] == [] and cmds["spark-a"] == cmds["spark-b"] == []


def test_files_installed_by_a_run_cut_short_before_its_reload_are_loaded_by_the_next_run():
    plans = _plans()
    state, names, cmds = _run(plans, lambda p: _status(p, loaded=False))  # the files are right, HAProxy is not
    assert names["gw-1"] == ["Save the servers' states, then reload haproxy (no connection dropped)"], names
    text = "\n".join(cmds["gw-1"])
    assert text.index("systemctl reload haproxy") < text.index(f"> {LAYOUT.loaded_stamp}")  # the stamp after it


def test_keys_changed_with_the_config_sync_the_running_worker_before_the_reload(monkeypatch):
    old = _plans()
    monkeypatch.setenv("SPECFLEET_API_KEYS", "other sk-specfleet-unit-other-key-987654\n")
    new = make_plans({**FLEET, "spark-c": {"ssh_hostname": "10.0.0.4", "serves": "eagle3"}}, None,
                     groups={"gateway": ["gw-1"]})
    state, names, cmds = _run(new, lambda p: _status(old["gw-1"]))
    text = "\n".join(cmds["gw-1"])
    # the old worker keeps its kept-alive connections after the reload: it must refuse the revoked key too
    assert text.index(f"sync-map {LAYOUT.keys_map}") < text.index("systemctl reload haproxy"), text
    # an unproven copy (of the keys, of the TLS key) never stays behind, whether the check passed or not
    assert f"rc=$?; rm -f {LAYOUT.config}.specfleet-new" in text and f"{LAYOUT.keys_map}.specfleet-new" in text


def test_bad_keys_are_refused_with_one_line_and_nothing_changes(monkeypatch):
    monkeypatch.setenv("SPECFLEET_API_KEYS", f"ci {KEY}\nbroken-line-with-{KEY}-in-it\n")
    state, names, cmds = _run(_plans(), _status)
    assert "gw-1" in {h.name.removeprefix("@fake/") for h in state.failed_hosts}
    text = "\n".join(cmds["gw-1"])
    assert "gw-1: gateway_api_keys_file: $SPECFLEET_API_KEYS line 2 is not a valid key line" in text
    assert KEY not in text and "Write" not in " ".join(names["gw-1"])


def test_an_engine_without_lua_is_refused_before_anything_changes():
    state, names, cmds = _run(_plans(), lambda p: _status(p, features="+OPENSSL +PROMEX", files={}))
    text = "\n".join(cmds["gw-1"])
    assert "gw-1: gateway: haproxy 2.8.5-1ubuntu3 is built without LUA" in text
    assert not [c for c in cmds["gw-1"][1:] if "cat >" in c or "systemctl" in c], cmds  # [0]: the status read


def _pair(tmp_path, name: str) -> tuple[Path, Path]:
    """A self-signed certificate and its unencrypted key (openssl, as an operator makes one)."""
    cert, key = tmp_path / f"{name}-cert.pem", tmp_path / f"{name}-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_pair_is_one_root_only_pem_and_the_config_binds_ssl(tmp_path):
    cert, key = _pair(tmp_path, "gw")
    plans = _plans(gateway_tls_cert_file=str(cert), gateway_tls_key_file=str(key))
    state, names, cmds = _run(plans, lambda p: _status(p, files={}))
    assert f"Write {LAYOUT.tls_pem}.specfleet-new (root-only, from stdin)" in names["gw-1"], names
    body = key.read_text().splitlines()[1]  # a line of the key's base64
    assert body not in "\n".join(cmds["gw-1"])
    assert f"Write {LAYOUT.config}.specfleet-check" in names["gw-1"]  # the check names the new PEM (root-only)


def test_a_key_that_is_not_the_certificates_is_refused_on_the_controller(tmp_path):
    cert, _ = _pair(tmp_path, "one")
    _, other_key = _pair(tmp_path, "two")
    plans = _plans(gateway_tls_cert_file=str(cert), gateway_tls_key_file=str(other_key))
    state, names, cmds = _run(plans, lambda p: _status(p, files={}))
    assert names["gw-1"] == [] and "gw-1" in {h.name.removeprefix("@fake/") for h in state.failed_hosts}
    problems = gateway_secrets(plans["gw-1"].settings)[2]
    assert len(problems) == 1 and problems[0].startswith(f"gateway_tls_key_file: {other_key} does not load with "
                                                         f"{cert} ("), problems


# ---- a rollout checks every gateway first ------------------------------------------------------------------------
def _rollout(monkeypatch, gateway_lines: dict[str, list[str]], without=()):
    from specfleet.fleet import run as runner
    from specfleet.serving.run import rollout

    plans = make_plans({**FLEET, "gw-2": {"ssh_hostname": "10.0.0.9"}}, "eagle3", groups={"gateway": ["gw-1", "gw-2"]})
    calls: list[str] = []

    def run_on(plans, hosts, fn, *args):
        calls.append(fn.__name__ if fn.__name__ != "switch" else ("switch", args))
        if fn.__name__ != "gateway_alive":
            return set()
        state = run_deploy({h: plans[h] for h in hosts}, fn, *args,
                           responses=lambda p: {"gateway.GatewayStatus": gateway_lines[p.settings.host]})
        found = args[0]
        for key in [k for k in found if k.startswith("@fake/")]:  # pyinfra's name of a @fake host
            found[key.removeprefix("@fake/")] = found.pop(key)
        return {h.name.removeprefix("@fake/") for h in state.failed_hosts}

    monkeypatch.setattr(runner, "run_on", run_on)
    monkeypatch.setattr(runner, "read_statuses", lambda plans, hosts: {h: {"current": "r-0", "active": "active"}
                                                                       for h in hosts})
    monkeypatch.setattr(runner, "lock_hosts", lambda plans, hosts, rid, *k: calls.append("lock") or (hosts, set(), {}))
    r = rollout.Rollout("eagle3", plans, [], ["spark-a"], "1", 0, log=lambda line: None, gateways=["gw-1", "gw-2"],
                        without_gateways=list(without))
    rollout.run(r)
    return r, calls


UP = ["haproxy\t2.8.5", "features\t+LUA +PROMEX", "active\tactive", "enabled\tenabled", "admin\tyes"]
DOWN = ["haproxy\t2.8.5", "features\t+LUA +PROMEX", "active\tfailed", "enabled\tenabled", "admin\t"]


def test_a_gateway_that_does_not_answer_refuses_the_rollout_before_any_lock(monkeypatch):
    r, calls = _rollout(monkeypatch, {"gw-1": UP, "gw-2": DOWN})
    assert r.gateways_down == {"gw-2": "haproxy is not running"}
    assert calls == ["gateway_alive"]  # no lock, no stage, no switch


def test_without_gateway_names_it_and_the_rollout_goes_on(monkeypatch):
    r, calls = _rollout(monkeypatch, {"gw-1": UP, "gw-2": DOWN}, without=["gw-2"])
    assert r.gateways_down == {} and calls[:2] == ["gateway_alive", "lock"]
    assert ("switch", (None, ("10.0.0.9",))) in calls, calls  # the Sparks' drains do not wait for gw-2


def test_the_command_line_says_which_gateway_and_how_to_proceed(fleet_file, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    from specfleet.serving.run import rollout as engine

    fleet_file("all:\n  hosts: {spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3}}\n  children:\n    gateway:\n"
               "      hosts: {gw-1: {ssh_hostname: 10.0.0.1}}\n")

    def run(r):
        r.gateways_down = {"gw-1": "unreachable over SSH"}
    monkeypatch.setattr(engine, "run", run)
    result = CliRunner().invoke(main, ["rollout", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == engine.EXIT_REFUSED
    assert result.output.strip().endswith("gw-1: refused: gateway cannot be reached (unreachable over SSH); nothing "
                                          "changed. Bring it back, or roll out without it: --without-gateway gw-1")
    result = CliRunner().invoke(main, ["rollout", "inventory.py", "deploys/eagle3.py", "--without-gateway", "spark-a"])
    assert result.exit_code == 2 and "--without-gateway spark-a: not a host of the gateway group (gateways: gw-1)" \
        in result.output


def test_a_batch_that_would_switch_every_spark_of_a_model_is_refused(fleet_file, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    from specfleet.serving.run import rollout as engine

    fleet_file("all:\n  hosts: {spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3}, spark-b: {ssh_hostname: 10.0.0.3, "
               "serves: eagle3}, spark-c: {ssh_hostname: 10.0.0.4, serves: eagle3}}\n  children:\n    gateway:\n"
               "      hosts: {gw-1: {ssh_hostname: 10.0.0.1}}\n")
    runs = []

    def run(r):  # the rollout would start here: record it and stop
        runs.append(r)
        raise SystemExit(0)
    monkeypatch.setattr(engine, "run", run)
    result = CliRunner().invoke(main, ["rollout", "inventory.py", "deploys/eagle3.py", "--batches", "3"])
    assert result.exit_code == 2 and not runs, result.output
    assert result.output.splitlines() == [
        "--batches 3: batch 1 switches every Spark of openai/gpt-oss-120b at once (spark-a, spark-b, spark-c): the "
        "gateways would have none to send its requests to (allowed: batches that leave one of them serving, e.g. 1,1)"]
    for ok in (["--batches", "1,100%"], ["--batches", "2", "--limit", "spark-a,spark-b"]):  # one always serves on
        result = CliRunner().invoke(main, ["rollout", "inventory.py", "deploys/eagle3.py", *ok])
        assert "switches every Spark" not in result.output and len(runs) == 1, result.output
        runs.clear()


def test_plan_of_the_gateway_deploy_says_what_it_would_do(fleet_file, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file("all:\n  hosts: {spark-a: {ssh_hostname: 10.0.0.2, serves: eagle3}}\n  children:\n    gateway:\n"
               "      hosts: {gw-1: {ssh_hostname: 10.0.0.1}}\n")
    state_of = {"files": {}}
    fake_run_on(monkeypatch, lambda p: {"gateway.GatewayStatus": _status(p, files=state_of["files"])})
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/gateway.py"])
    assert result.exit_code == 10, result.output
    assert "gw-1: gateway: 6 change(s)" in result.output and f"  write {LAYOUT.keys_map} (root-only)" in result.output
    assert "  check the config with haproxy -c, then reload haproxy" in result.output
    state_of["files"] = None  # converged
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/gateway.py"])
    assert result.exit_code == 0 and "gw-1: gateway: nothing to do" in result.output, result.output
