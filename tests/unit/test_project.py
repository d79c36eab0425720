"""A fleet project (specfleet/fleet/project.py): `specfleet init`, the project's group_data/all.py overrides and
their precedence, and the repository root kept identical to the packaged scaffold."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import specfleet.fleet.project as project
from specfleet.cli import main
from specfleet.fleet.inventory import load_inventory
from specfleet.fleet.project import scaffold_files
from specfleet.plan import build_plans, pyinfra_groups
from tests.unit.fakehost import write_fake_lock

ROOT = Path(__file__).resolve().parents[2]
DEPLOYS = ("eagle3", "draft_target", "baseline", "ngram", "qwen3_eagle3_pair", "vllm_eagle3", "vllm_draft_target", "vllm_ngram",
           "vllm_baseline", "gateway", "hub_mirror", "cleanup", "rollback")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "specfleet" / "scaffold" / "README.md"]


@pytest.fixture(autouse=True)
def _fresh_project(monkeypatch):
    monkeypatch.setattr(project, "_project", None)  # undone after each test (use_project sets it)


@pytest.fixture
def proj(tmp_path, monkeypatch):
    """A project written by `specfleet init`, as the current directory."""
    result = CliRunner().invoke(main, ["init", str(tmp_path / "fleet")])
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path / "fleet")
    return tmp_path / "fleet"


def test_scaffold_is_what_the_repository_root_holds():
    files = scaffold_files()
    assert set(files) == {"inventory.py", *(f"deploys/{d}.py" for d in DEPLOYS), "group_data/all.py",
                          "inventory/fleet.yml", "tests/infra/conftest.py", "tests/infra/test_converged.py",
                          "tests/infra/test_real_gpu.py", "README.md", "profiles/my_eagle3.yml.example"}
    for rel, content in files.items():
        if rel not in ("inventory/fleet.yml", "README.md"):
            assert (ROOT / rel).read_text() == content, f"{rel} differs from specfleet/scaffold/{rel}"


def test_every_deploy_the_docs_name_is_written_by_init():
    """A user runs what the docs name (`pyinfra inventory.py deploys/X.py`) in the project `specfleet init` wrote."""
    named = {m for doc in DOCS for m in re.findall(r"\bdeploys/([a-z0-9_]+)\.py", doc.read_text())}
    assert "gateway" in named and "hub_mirror" in named  # the check reads the docs
    assert not named - {rel.removeprefix("deploys/").removesuffix(".py") for rel in scaffold_files()}, \
        sorted(named - set(DEPLOYS))


def test_the_repository_has_no_overrides():
    from specfleet.fleet.tunables import load_overrides
    assert load_overrides(ROOT) == ({}, [])


def test_init_writes_a_project_and_refuses_to_overwrite(tmp_path):
    target = tmp_path / "p"
    result = CliRunner().invoke(main, ["init", str(target)])
    assert result.exit_code == 0, result.output
    nexts = result.output.splitlines()[-1].removeprefix("next: ").split("; ")
    assert nexts.index("specfleet lock inventory.py") < nexts.index("specfleet check inventory.py deploys/eagle3.py"), \
        "check reads the lock: the next steps lock first"
    assert (target / "inventory/fleet.yml").read_text() == scaffold_files()["inventory/fleet.yml"]
    assert all((target / f"deploys/{d}.py").is_file() for d in DEPLOYS)
    (target / "deploys/eagle3.py").write_text("# mine\n")
    (target / "README.md").unlink()
    again = CliRunner().invoke(main, ["init", str(target)])
    assert again.exit_code == 2
    assert len(again.output.strip().splitlines()) == 1 and "refusing to overwrite" in again.output
    assert (target / "deploys/eagle3.py").read_text() == "# mine\n" and not (target / "README.md").exists()


def test_check_from_the_project_uses_its_fleet_file(proj):
    write_fake_lock(proj / "inventory/fleet.yml")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output
    assert "2 host(s) valid" in result.output and "spark-01, spark-02" in result.output


def test_project_is_the_directory_of_the_inventory_py_given(proj, tmp_path, monkeypatch):
    write_fake_lock(proj / "inventory/fleet.yml")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "fleet/inventory.py", "fleet/deploys/cleanup.py"])
    assert result.exit_code == 0, result.output
    groups = pyinfra_groups(argv=["pyinfra", "fleet/inventory.py"], project=str(proj / "inventory.py"))
    assert [h for h, _ in groups["lab_sparks"]] == ["spark-01", "spark-02"]


def _overrides(proj, text):
    (proj / "group_data/all.py").write_text((proj / "group_data/all.py").read_text() + text)


def test_group_data_overrides_sit_between_defaults_and_inventory(proj):
    _overrides(proj, 'serve_port = 9000\noperator_users = ["alice"]\nimport os\n_helper = 1\n'
                     'extra_llm_api_options = {"enable_iter_perf_stats": True, "kv_cache_config": {"free_gpu_memory_fraction": 0.5}}\n')
    fleet = proj / "inventory/fleet.yml"
    fleet.write_text("all:\n  hosts:\n    a:\n    b: {serve_port: 9100, extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: 0.7}}}\n")
    plans = build_plans(load_inventory(fleet), "eagle3", resolve=False)
    a, b = plans["a"].settings, plans["b"].settings
    assert (a.serve_port, b.serve_port) == (9000, 9100)
    assert a.operator_users == b.operator_users == ["alice"]
    # group_data's TRT-LLM options are merged under the profile's: they add, the profile's 0.9 stays ...
    assert a.llm_api_options["enable_iter_perf_stats"] is True
    assert a.llm_api_options["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False}
    # ... and the fleet file's beat both
    assert b.llm_api_options["kv_cache_config"]["free_gpu_memory_fraction"] == 0.7
    assert b.llm_api_options["enable_iter_perf_stats"] is True


def test_bad_group_data_is_refused_in_one_line_each(proj):
    write_fake_lock(proj / "inventory/fleet.yml")
    _overrides(proj, 'imagee = "x"\nssh_user = "root"\n')
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2
    path = proj.resolve() / "group_data/all.py"
    assert result.output.strip().splitlines() == [
        f"{path}: imagee: unknown variable (did you mean image?)",
        f"{path}: ssh_user: connection vars belong in the fleet file (all: vars:), not in group_data/all.py"]


def test_bad_group_data_value_names_the_host_and_key(proj):
    write_fake_lock(proj / "inventory/fleet.yml")
    _overrides(proj, "serve_port = 0\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/cleanup.py"])
    assert result.exit_code == 2
    assert "lab_sparks (spark-01, spark-02): serve_port: input should be greater than or equal to 1" \
        in result.output.splitlines(), result.output


def test_unloadable_group_data_is_one_line(proj):
    _overrides(proj, "serve_port = (\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/cleanup.py"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "group_data/all.py: file: cannot be loaded: SyntaxError" in result.output


def test_vars_shows_the_project_overrides(proj):
    _overrides(proj, "serve_port = 9000\n")
    result = CliRunner().invoke(main, ["vars", "--project"])
    assert result.exit_code == 0
    assert "| `serve_port` | `8000` | TCP port the server (trtllm-serve, vllm serve) listens on | `9000` |" in result.output.splitlines()
