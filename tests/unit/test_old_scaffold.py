"""The scaffold of version 0.1.0, which users' projects contain, works with this package.

tests/unit/scaffold_v010 is what `specfleet init` wrote in version 0.1.0, every file as written (the example fleet as
inventory/fleet.yml). A user's project keeps these files across upgrades, and they reach specfleet only through
`specfleet.plan.pyinfra_groups` (inventory.py), the deploy functions of `specfleet.steps` (the deploy files) and
`specfleet.testinfra.{fixtures,converged,real_gpu}` (tests/infra). So, with this package: its inventory.py loads the
example fleet for every deploy but the two the example does not fit, which it refuses with one line per problem; each
of its deploy files, run as pyinfra's command line runs it on hosts already where that deploy leaves them, changes
nothing; and its testinfra suite imports and holds the tests listed here. The tree is pinned by a digest over its
files: it is what users have, and is never edited.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import shutil

import pytest
import yaml

from tests.unit import fakefleet
from tests.unit.fakehost import changed_ops, executed

DIGEST = "a706419a372c50a6a8e9cddc0c1de49de42e87c3ecfaa168a84ccc871f3746ba"  # sha256 over (path, content) of each file
DEPLOYS = ("baseline", "cleanup", "draft_target", "eagle3", "gateway", "hub_mirror", "qwen3_eagle3_pair", "rollback")
# The deploys the example fleet does not fit, and the host and variable of each problem its inventory.py prints:
# spark-02's draft override under the baseline (no draft), and the example's image under the pair's profile.
REFUSED = {"baseline": ["spark-02: extra_llm_api_options.speculative_config"],
           "qwen3_eagle3_pair": ["lab_sparks (spark-01, spark-02): image"]}
# The fleets the deploys run on: the example; the example without spark-02's draft override, for the baseline; and
# one with every role (tests/unit/fakefleet.py). Each deploy runs on hosts already where it leaves them: a profile's
# converge and the gateway's and the mirror's deploys on a converged fleet, cleanup on a fleet without specfleet,
# and the rollback to EARLIER on a fleet already rolled back to it.
ALREADY = {"cleanup": "fresh", "rollback": "rolled back"}
PROFILES = ("baseline", "draft_target", "eagle3", "qwen3_eagle3_pair")  # the deploys that converge a profile
RUNS = [("example", d) for d in ("eagle3", "draft_target", "gateway", "hub_mirror", "cleanup", "rollback")] + \
       [("example without the draft override", "baseline")] + \
       [("every role", d) for d in ("eagle3", "qwen3_eagle3_pair", "gateway", "hub_mirror", "cleanup", "rollback")]
# The Hub mirror's warm-up runs on the controller (pyinfra counts a function as a change): it changed nothing when
# the mirror ran no command but its status read.
WARM_UP = "Converge | Hub mirror: warm it with the files the fleet needs (the other hosts stage from it afterwards)"
# The tests of its tests/infra modules, as they run on each host.
INFRA_TESTS = {
    "test_converged.py": [
        "test_a_pair_hosts_keys_link_and_login", "test_completion_returns_text", "test_config_file_equals_render_output",
        "test_container_runs_with_the_seed_flags", "test_earlyoom_watches_available_memory_with_the_deploys_floor",
        "test_encodings_staged_with_expected_hashes", "test_hf_cache_ls_lists_the_models",
        "test_memory_protection_serving_host_keeps_the_reserve_and_its_daemons_come_last",
        "test_models_complete_at_the_recorded_commit", "test_models_endpoint_lists_the_model",
        "test_operators_in_docker_group_and_can_use_docker", "test_port_listening_on_the_configured_address",
        "test_the_gate_passed_for_the_current_release", "test_the_server_has_the_limits_it_asked_for",
        "test_token_file_is_root_only", "test_token_not_in_container_env_nor_unit",
        "test_unit_file_equals_render_output_enabled_and_active"],
    "test_real_gpu.py": ["test_metrics_show_draft_acceptance", "test_nvidia_smi_in_the_container",
                         "test_train_prompt_at_temperature_zero_answers_276"],
}
INFRA_FIXTURES = {"conftest.py": ["pytest_configure", "spark"], "test_real_gpu.py": ["gpu_spark"]}


def digest(root) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@pytest.fixture(autouse=True)
def _gateway_keys(monkeypatch):
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)


def _fleet(name: str) -> str | None:
    if name == "example":
        return None  # the one init wrote
    if name == "every role":
        return fakefleet.FLEET
    doc = yaml.safe_load((fakefleet.SCAFFOLD / "inventory" / "fleet.yml").read_text())
    del doc["all"]["children"]["lab_sparks"]["hosts"]["spark-02"]["extra_llm_api_options"]
    return yaml.safe_dump(doc)


def test_the_vendored_scaffold_is_what_version_0_1_0_wrote():
    assert digest(fakefleet.SCAFFOLD) == DIGEST, (
        "tests/unit/scaffold_v010 is the scaffold users' projects contain: put it back as it was (git checkout)")
    assert sorted(p.stem for p in (fakefleet.SCAFFOLD / "deploys").glob("*.py")) == list(DEPLOYS)


def test_the_digest_sees_a_changed_file(tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(fakefleet.SCAFFOLD, root, ignore=shutil.ignore_patterns("__pycache__"))
    before = digest(root)
    (root / "deploys" / "eagle3.py").write_text((root / "deploys" / "eagle3.py").read_text() + "\n")
    assert digest(root) != before


@pytest.mark.parametrize("deploy", [None, *DEPLOYS])
def test_its_inventory_loads_the_example_fleet_and_refuses_what_it_refused(deploy, tmp_path, capsys):
    root = fakefleet.project(tmp_path, fleet=None)
    argv = [str(root / "deploys" / f"{deploy}.py")] if deploy else []
    if deploy in REFUSED:
        with pytest.raises(SystemExit) as exc:
            fakefleet.load_inventory_py(root, *argv)
        assert exc.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert all(line.startswith("specfleet: ") for line in lines), lines
        assert [": ".join(line.split(": ")[1:3]) for line in lines] == REFUSED[deploy], lines
        return
    groups = {k: v for k, v in fakefleet.load_inventory_py(root, *argv).items() if isinstance(v, list)}
    assert {group: [h for h, _ in hosts] for group, hosts in groups.items()} == {
        "all": ["spark-01", "spark-02"], "lab_sparks": ["spark-01", "spark-02"]}
    for name, data in groups["all"]:
        assert {k: v for k, v in data.items() if k != "specfleet"} == {
            "ssh_user": "nvidia", "_sudo": True, "ssh_hostname": f"{name}.lab.example"}
        assert data["specfleet"] is not None  # the plan the deploys read


def test_every_deploy_file_runs_below():
    assert sorted({deploy for _, deploy in RUNS}) == list(DEPLOYS)


def what_changed(state) -> dict[str, list[str]]:
    """Per host, the operations that changed something on it."""
    out = {h: ops for h, ops in changed_ops(state).items() if ops}
    for host, ops in list(out.items()):
        if ops == [WARM_UP] and len(executed(state)[host]) == 1:
            del out[host]
    return out


@pytest.mark.parametrize("fleet, deploy", RUNS)
def test_each_deploy_changes_nothing_on_hosts_where_it_already_left_them(fleet, deploy, tmp_path):
    root = fakefleet.project(tmp_path, fleet=_fleet(fleet))
    state_name = ALREADY.get(deploy, "converged")
    data = [f"rollback_to={fakefleet.EARLIER}"] if deploy == "rollback" else []
    answers = fakefleet.answers(root, state_name, profile=deploy if deploy in PROFILES else "eagle3")
    state, trace = fakefleet.run_file(root, deploy, answers, *data)
    assert not state.failed_hosts, sorted(h.name for h in state.failed_hosts)
    assert what_changed(state) == {}
    assert any(executed(state).values()) or deploy in ("gateway", "hub_mirror") and fleet == "example", \
        "the deploy read no host"


def test_changing_nothing_is_checked(tmp_path):
    """The same check fails where there is something to do: the rollback on the converged fleet switches back."""
    root = fakefleet.project(tmp_path)
    state, _ = fakefleet.run_file(root, "rollback", fakefleet.answers(root, "converged"),
                                  f"rollback_to={fakefleet.EARLIER}")
    assert sorted(what_changed(state)) == ["spark-01", "spark-02", "spark-03"]


def _load(path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_testinfra_suite_imports_and_holds_the_same_tests(tmp_path):
    root = fakefleet.project(tmp_path, fleet=None)
    infra = root / "tests" / "infra"
    modules = {p.name: _load(p, f"scaffold_v010_infra_{p.stem}") for p in sorted(infra.glob("*.py"))}
    assert sorted(modules) == ["conftest.py", "test_converged.py", "test_real_gpu.py"]
    for name, module in modules.items():
        tests = sorted(n for n, obj in vars(module).items() if n.startswith("test_") and callable(obj))
        assert tests == INFRA_TESTS.get(name, []), name
        assert all(hasattr(module, fixture) for fixture in INFRA_FIXTURES.get(name, [])), name
    # every test asks only for fixtures the suite provides
    provided = {f for fixtures in INFRA_FIXTURES.values() for f in fixtures} | {"request"}
    for name, tests in INFRA_TESTS.items():
        for test in tests:
            wanted = set(inspect.signature(getattr(modules[name], test)).parameters)
            assert wanted <= provided, (name, test, wanted - provided)
