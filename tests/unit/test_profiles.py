"""Profiles declared in a fleet project (profiles/NAME.yml) and the packaged ones (specfleet/profiles/): one format,
checked before any host is read; a declared profile goes through lock, check, plan, the memory fit and the gateway
like a packaged one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import specfleet.fleet.project
from specfleet.cli import main
from specfleet.fleet.profiles import catalog, packaged_names
from specfleet.memory.rules import fit
from tests.unit import fakefleet
from tests.unit.fakehost import make_plans, write_fake_lock

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "specfleet" / "profiles"
EXAMPLES = sorted((ROOT / "docs" / "examples" / "profiles").glob("*.yml"))
FLEET = "all:\n  hosts:\n    s1: {ssh_hostname: 10.0.0.11}\n"

MINE = """name: mine
extends: eagle3
description: EAGLE-3 drafting 3 tokens
options:
  speculative_config: {max_draft_len: 3}
"""
VLLM = """name: mine
engine: vllm
description: a vLLM profile
target: {repo: Qwen/Qwen3-8B}
draft: {repo: AngelSlim/Qwen3-8B_eagle3, mount: /opt/head/}
options:
  speculative_config: {method: eagle3, num_speculative_tokens: 3}
smoke: {prompt: hi, max_tokens: 8}
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A fleet project (the scaffold, one Spark) whose profiles/ and deploys/ a test writes; its lock rewritten."""
    monkeypatch.delenv("SPECFLEET_INVENTORY", raising=False)
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
    root = fakefleet.project(tmp_path, FLEET)
    monkeypatch.setattr(specfleet.fleet.project, "_project", root)

    def declare(name: str, text: str, lock: bool = True) -> Path:
        (root / "profiles").mkdir(exist_ok=True)
        (root / "profiles" / f"{name}.yml").write_text(text)
        (root / "deploys" / f"{name}.py").write_text(f'from specfleet.steps import converge\n\nPROFILE = "{name}"\n\n'
                                                     "converge(PROFILE)\n")
        if lock and not catalog(root).problems:
            write_fake_lock(root / "inventory" / "fleet.yml")
        return root
    return declare


def _cli(root: Path, *args: str):
    return CliRunner().invoke(main, [args[0], str(root / "inventory.py"), *args[1:]])


def test_the_index_lists_every_packaged_profile_file_once():
    assert sorted(packaged_names()) == sorted(p.stem for p in PACKAGED.glob("*.yml") if p.stem != "index")
    assert len(set(packaged_names())) == len(packaged_names())


def test_a_declared_profile_extends_a_packaged_one_and_is_checked_planned_and_listed(project):
    root = project("mine", MINE)
    result = _cli(root, "check", str(root / "deploys" / "mine.py"))
    assert result.exit_code == 0, result.output
    assert "[mine]" in result.output
    listed = _cli(root, "profiles")
    assert "| mine | profiles/mine.yml | trtllm | openai/gpt-oss-120b | nvidia/gpt-oss-120b-Eagle3-long-context | " \
           "Eagle |" in listed.output, listed.output
    mine = make_plans({"s1": {}}, "mine")["s1"]
    eagle3 = make_plans({"s1": {}}, "eagle3")["s1"]
    assert "max_draft_len: 3" in mine.rendered.config and "max_draft_len: 5" in eagle3.rendered.config
    assert mine.rendered.config.replace("max_draft_len: 3", "max_draft_len: 5") == eagle3.rendered.config
    assert mine.release_id != eagle3.release_id and mine.release_record("now")["profile"] == "mine"


def test_a_declared_vllm_profile_is_locked_and_served_under_its_target(project):
    root = project("mine", VLLM)
    lock = yaml.safe_load((root / "inventory" / "fleet.yml.lock").read_text())
    assert any("Qwen/Qwen3-8B" in str(m) for m in lock["models"]), lock["models"]
    plan = make_plans({"s1": {}}, "mine")["s1"]
    assert plan.release_record("now")["served_model"] == "Qwen/Qwen3-8B"
    assert '"model":"/opt/head/"' in plan.rendered.unit.replace("\\", "")  # the draft's mount, in --speculative-config
    assert "/current/draft:/opt/head:ro" in plan.rendered.unit


def test_the_memory_fit_takes_the_profiles_overhead(project):
    project("mine", MINE + "memory: {overhead_fraction: 1.5}\n")
    mine, eagle3 = make_plans({"s1": {}}, "mine")["s1"], make_plans({"s1": {}}, "eagle3")["s1"]
    a, b = fit(mine.settings, mine.pins), fit(eagle3.settings, eagle3.pins)
    assert a is not None and b is not None and a.weights == b.weights
    assert a.need == a.weights + int(a.weights * 1.5) and b.need == b.weights + int(b.weights * 0.15)


def test_a_gateway_routes_a_declared_profiles_model(project):
    project("mine", VLLM)
    plans = make_plans({"s1": {"serves": "mine", "fleet_address": "10.0.0.11"},
                        "gw": {"fleet_address": "10.0.0.2"}}, None, groups={"gateway": ["gw"]})
    backends = plans["gw"].settings.gateway_backends
    assert backends["s1"][0] == "Qwen/Qwen3-8B", backends


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_each_documented_example_passes_check(project, example):
    root = project(example.stem, example.read_text())
    result = _cli(root, "check", str(root / "deploys" / f"{example.stem}.py"))
    assert result.exit_code == 0, result.output


def test_the_scaffolds_example_passes_check_once_copied(project):
    text = (ROOT / "specfleet" / "scaffold" / "profiles" / "my_eagle3.yml.example").read_text()
    root = project("my_eagle3", text)
    assert _cli(root, "check", str(root / "deploys" / "my_eagle3.py")).exit_code == 0


OK = VLLM.replace("name: mine", "name: bad")
TRT = MINE.replace("name: mine", "name: bad")
# (the file's text, the key of the one line, the start of its message)
BAD = [
    ("name: bad\n: [", "(file)", "is not valid YAML at line"),
    ("- a list\n", "(file)", "is not a mapping of keys"),
    (OK.replace("name: bad", "name: other"), "name", "'other' is not the file's name"),
    (OK + "colour: red\n", "colour", "unknown key"),
    (OK + "descripton: x\n", "descripton", "unknown key; did you mean description?"),
    (OK.replace("engine: vllm", "engine: sglang"), "engine", "'sglang' is not an engine (allowed: trtllm, vllm)"),
    (OK.replace("target: {repo: Qwen/Qwen3-8B}\n", ""), "target", "is required"),
    (OK.replace("Qwen/Qwen3-8B}", "Qwen3-8B}"), "target.repo", "'Qwen3-8B' is not a Hub repo id"),
    (OK.replace("Qwen/Qwen3-8B}", "'Qwen/Qwen3 8B;reboot'}"), "target.repo", "'Qwen/Qwen3 8B;reboot' is not a Hub"),
    (OK.replace("Qwen/Qwen3-8B}", "Qwen/Qwen3--8B}"), "target.repo", "'Qwen/Qwen3--8B' is not a Hub repo id"),
    (OK.replace("{repo: Qwen/Qwen3-8B}", "{repo: Qwen/Qwen3-8B, revision: 'main;rm -rf /'}"), "target.revision",
     "'main;rm -rf /' has characters that are not allowed"),
    (OK.replace("{repo: Qwen/Qwen3-8B}", "{repo: Qwen/Qwen3-8B, ignore_patterns: ['$(reboot)']}"),
     "target.ignore_patterns", "'$(reboot)' is not a file pattern"),
    (OK.replace("{repo: Qwen/Qwen3-8B}", "{repo: Qwen/Qwen3-8B, branch: main}"), "target.branch", "unknown key"),
    (OK.replace("mount: /opt/head/", "mount: /usr/bin/"), "draft.mount", "'/usr/bin/' is outside the container's"),
    (OK.replace("mount: /opt/head/", "mount: /opt/tiktoken/"), "draft.mount", "'/opt/tiktoken/' is outside the"),
    (OK.replace("mount: /opt/head/", "mount: '/opt/a b/'"), "draft.mount", "'/opt/a b/' has characters that are"),
    (OK.replace("mount: /opt/head/", "mount: /opt/../etc/"), "draft.mount", "'/opt/../etc/' has a '.' or '..' name"),
    (OK.replace(", mount: /opt/head/", ""), "draft.mount", "is required: where the draft is mounted"),
    (OK.replace("method: eagle3", "method: eagle4"), "options.speculative_config.method",
     "'eagle4' is not accepted (allowed: ngram, "),
    (OK.replace("num_speculative_tokens: 3}", "num_speculative_tokens: 3, rejection_sample_method: strict}")
     + "image: vllm/vllm-openai:v0.28.0\n",
     "options.speculative_config.rejection_sample_method", "'strict' is not accepted (allowed: standard)"),
    (OK.replace("num_speculative_tokens: 3}", "num_speculative_tokens: 0}"),
     "options.speculative_config.num_speculative_tokens", "0 is out of range (allowed: an integer > 0)"),
    (OK.replace("method: eagle3", "method: ngram"), "options.speculative_config.model", "is not used by method ngram"),
    (OK.replace("  speculative_config:", "  gpu_memory_utilization: 0.9\n  speculative_config:"),
     "options.gpu_memory_utilization", "is set by specfleet"),
    (OK.replace("speculative_config: {", "speculative_config: {model: /opt/other/, "),
     "options.speculative_config.model", "'/opt/other/' is not draft.mount '/opt/head/'"),
    (OK + "image: vllm/vllm-openai:latest\n", "image", "'vllm/vllm-openai:latest' names no vLLM version"),
    (OK + "image: vllm/vllm-openai:v0.19.0\n", "image", "'vllm/vllm-openai:v0.19.0' carries vLLM 0.19.0"),
    (OK + "image: '--privileged'\n", "image", "'--privileged' would be read as a docker option"),
    (OK + "nodes: 2\n", "nodes", "2 is not accepted (allowed: 1 (vllm serve serves no pair))"),
    (OK + "serve_flags: [--x]\n", "serve_flags", "vllm serve takes no flags of a profile"),
    (OK + "min_version: 0.28.0\n", "min_version", "vLLM's version is its image's"),
    (OK + "memory: {overhead_fraction: -1}\n", "memory.overhead_fraction", "-1 is out of range"),
    (OK.replace("max_tokens: 8}", "max_tokens: 0}"), "smoke.max_tokens", "0 is out of range"),
    (OK.replace("max_tokens: 8}", "max_tokens: 8, stream: true}"), "smoke.stream", "unknown key"),
    (OK.replace("description: a vLLM profile", "description: \"two\\nlines\""), "description",
     "'two\\nlines' is not one line of printable text"),
    (TRT.replace("extends: eagle3", "extends: eagle9"), "extends", "'eagle9' is not a packaged profile"),
    (TRT + "engine: vllm\n", "engine", "'vllm' is not eagle3's engine"),
    (TRT + "serve_flags: [--port, '9000']\n", "serve_flags", "'--port' is set by specfleet"),
    (TRT + "serve_flags: ['--backend pytorch']\n", "serve_flags", "'--backend pytorch' is not one argument"),
    (TRT + "min_version: soon\n", "min_version", "'soon' is not a TensorRT-LLM version"),
    (TRT.replace("max_draft_len: 3", "max_draft_len: 3, decoding_type: Medusa"),
     "options.speculative_config", "decoding_type 'Medusa' is not accepted by trtllm-serve 1.2.0rc6"),
    (TRT + "  kv_cache_config: {free_gpu_memory_fraction: 1.5}\n", "options.kv_cache_config.free_gpu_memory_fraction",
     ""),
    (TRT + "draft: null\n", "options.speculative_config", "speculative_model_dir (the draft checkpoint dir) is "
                                                          "required for decoding_type Eagle"),
]



@pytest.mark.parametrize("text, key, start", BAD, ids=[f"{i}-{b[1]}" for i, b in enumerate(BAD)])
def test_a_bad_profile_file_is_one_line_and_exit_2(project, text, key, start):
    root = project("bad", text)
    result = _cli(root, "check", str(root / "deploys" / "eagle3.py"))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"profiles/bad.yml: {key}: {start}"), lines


def test_every_command_that_reads_the_project_refuses_a_bad_profile(project, capsys):
    root = project("bad", OK + "colour: red\n")
    line = "profiles/bad.yml: colour: unknown key"
    for args in (("check", str(root / "deploys" / "eagle3.py")), ("plan", str(root / "deploys" / "eagle3.py")),
                 ("lock",), ("profiles",), ("render", str(root / "deploys" / "eagle3.py"), "s1")):
        result = _cli(root, *args)
        assert result.exit_code == 2 and line in result.output, (args, result.output)
    with pytest.raises(SystemExit) as exc:
        fakefleet.load_inventory_py(root, str(root / "deploys" / "eagle3.py"))
    assert exc.value.code == 2 and line in capsys.readouterr().err


def test_a_project_profile_may_not_shadow_a_packaged_one(project):
    root = project("eagle3", MINE.replace("name: mine", "name: eagle3"), lock=False)
    result = _cli(root, "check", str(root / "deploys" / "eagle3.py"))
    assert result.exit_code == 2
    assert result.output.strip() == ("profiles/eagle3.yml: name: 'eagle3' is a packaged profile's name; a project "
                                     "profile may not shadow one (allowed: another name, with `extends: eagle3` to "
                                     "change it)")


def test_a_version_selects_its_methods(project):
    """dspark is vLLM 0.28.0's, not 0.20.1's: refused on the packaged image, accepted on v0.28.0."""
    spark = VLLM.replace("method: eagle3", "method: dspark").replace(
        "draft: {repo: AngelSlim/Qwen3-8B_eagle3, mount: /opt/head/}\n", "")
    root = project("mine", spark, lock=False)
    problems = [str(p) for p in catalog(root).problems]
    assert len(problems) == 1 and "'dspark' is not accepted" in problems[0], problems
    root = project("mine", spark + "image: vllm/vllm-openai:v0.28.0\n")
    assert not catalog(root).problems
    assert make_plans({"s1": {}}, "mine")["s1"].settings.vllm_version == "0.28.0"


def test_init_writes_the_example_profile(tmp_path):
    result = CliRunner().invoke(main, ["init", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    example = tmp_path / "p" / "profiles" / "my_eagle3.yml.example"
    assert example.read_text().startswith("# An example profile")
    shutil.copy(example, tmp_path / "p" / "profiles" / "my_eagle3.yml")
    assert "my_eagle3" in catalog(tmp_path / "p").profiles
