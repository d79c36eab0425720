"""Rendering reproduces the seed procedure (dgx-spark-playbooks nvidia/speculative-decoding, 1.2.0rc6)."""

import shlex

import yaml
from click.testing import CliRunner

from specfleet.cli import main
from tests.unit.conftest import TOKEN
from tests.unit.fakehost import make_plans

SEED_EAGLE3_YAML = """
enable_attention_dp: false
disable_overlap_scheduler: false
enable_autotuner: false
cuda_graph_config:
    max_batch_size: 1
speculative_config:
    decoding_type: Eagle
    max_draft_len: 5
    speculative_model_dir: /opt/gpt-oss-120b-Eagle3/

kv_cache_config:
    free_gpu_memory_fraction: 0.9
    enable_block_reuse: false
"""
SEED_DRAFT_TARGET_YAML = """
print_iter_log: false
disable_overlap_scheduler: true
speculative_config:
  decoding_type: DraftTarget
  max_draft_len: 4
  speculative_model_dir: /opt/Llama-3.1-8B-Instruct-FP4/
kv_cache_config:
  enable_block_reuse: false
"""
SEED_DOCKER_FLAGS = ["--gpus=all", "--ipc=host", "--network host", "--ulimit memlock=-1", "--ulimit stack=67108864"]
SEED_SERVE = {
    "eagle3": "trtllm-serve openai/gpt-oss-120b --host 127.0.0.1 --port 8000 --backend pytorch --tp_size 1 "
              "--max_batch_size 1 --extra_llm_api_options /etc/specfleet/extra-llm-api-config.yml",
    "draft_target": "trtllm-serve nvidia/Llama-3.3-70B-Instruct-FP4 --host 127.0.0.1 --port 8000 --backend pytorch "
                    "--tp_size 1 --max_batch_size 1 --kv_cache_free_gpu_memory_fraction 0.9 "
                    "--extra_llm_api_options /etc/specfleet/extra-llm-api-config.yml",
}
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"


def _files(profile, **vars):
    plan = make_plans({"spark-01": vars}, profile)["spark-01"]
    files = plan.files()
    return plan, {path.rsplit("/", 1)[1]: text for path, text in files.items()}


def _exec_start(unit: str) -> str:
    lines = unit.split("ExecStart=", 1)[1].split("\nExecStop=", 1)[0]
    return lines.replace("\\\n", " ")


def test_eagle3_yaml_is_the_seed_yaml():
    _, files = _files("eagle3")
    assert yaml.safe_load(files["extra-llm-api-config.yml"]) == yaml.safe_load(SEED_EAGLE3_YAML)
    # and in the seed's key order
    assert list(yaml.safe_load(files["extra-llm-api-config.yml"])) == list(yaml.safe_load(SEED_EAGLE3_YAML))


def test_draft_target_yaml_is_the_seed_yaml():
    _, files = _files("draft_target")
    assert yaml.safe_load(files["extra-llm-api-config.yml"]) == yaml.safe_load(SEED_DRAFT_TARGET_YAML)


def test_unit_runs_the_seed_container_command():
    for profile in ("eagle3", "draft_target"):
        _, files = _files(profile)
        cmd = " ".join(_exec_start(files["specfleet-trtllm.service"]).split())
        for flag in SEED_DOCKER_FLAGS:
            assert f" {flag} " in f" {cmd} ", (profile, flag)
        assert f" {IMAGE} {SEED_SERVE[profile]}" in cmd
        assert "HF_HUB_OFFLINE=1" in cmd and "HF_TOKEN" not in cmd and TOKEN not in cmd
        mounts = [a for a in shlex.split(cmd) if a.count(":") >= 2 and a.startswith("/")]
        assert mounts and all(m.endswith(":ro") for m in mounts), mounts


def test_draft_is_mounted_where_the_yaml_says():
    for profile, dir_ in (("eagle3", "/opt/gpt-oss-120b-Eagle3"), ("draft_target", "/opt/Llama-3.1-8B-Instruct-FP4")):
        _, files = _files(profile)
        assert f"/var/lib/specfleet/current/draft:{dir_}:ro" in files["specfleet-trtllm.service"]


def test_tiktoken_only_for_gpt_oss():
    _, eagle = _files("eagle3")
    _, dt = _files("draft_target")
    assert "TIKTOKEN_ENCODINGS_BASE=/opt/tiktoken" in eagle["specfleet-trtllm.service"]
    assert "TIKTOKEN" not in dt["specfleet-trtllm.service"]


def test_baseline_has_no_speculation_and_no_draft_mount():
    _, files = _files("baseline")
    config = yaml.safe_load(files["extra-llm-api-config.yml"])
    assert "speculative_config" not in config
    assert config["kv_cache_config"] == {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False}
    assert "/draft:" not in files["specfleet-trtllm.service"]


def test_smoke_requests_are_the_seed_prompts():
    import json
    _, files = _files("eagle3")
    smoke = json.loads(files["smoke.json"])
    assert smoke["model"] == "openai/gpt-oss-120b" and smoke["max_tokens"] == 300 and smoke["temperature"] == 0.7
    assert "train travels 180 km in 3 hours" in smoke["prompt"] and "slows down by 20%" in smoke["prompt"]
    _, files = _files("draft_target")
    smoke = json.loads(files["smoke.json"])
    assert smoke == {"model": "nvidia/Llama-3.3-70B-Instruct-FP4", "prompt": "Explain the benefits of speculative decoding:",
                     "max_tokens": 150, "temperature": 0.7}


def test_extra_options_deep_merge_and_gpus_flag():
    _, files = _files("eagle3", gpus=False, extra_llm_api_options={"speculative_config": {"max_draft_len": 3},
                                                                     "enable_iter_perf_stats": True})
    config = yaml.safe_load(files["extra-llm-api-config.yml"])
    assert config["speculative_config"] == {"decoding_type": "Eagle", "max_draft_len": 3,
                                            "speculative_model_dir": "/opt/gpt-oss-120b-Eagle3/"}
    assert config["enable_iter_perf_stats"] is True
    assert "--gpus" not in files["specfleet-trtllm.service"]


def test_loopback_by_default_and_bind_var():
    _, files = _files("eagle3")
    assert "--host 127.0.0.1" in files["specfleet-trtllm.service"]
    _, files = _files("eagle3", serve_host="0.0.0.0", serve_port=8355)
    assert "--host 0.0.0.0 --port 8355" in files["specfleet-trtllm.service"]


def test_render_command_redacts_the_token(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    result = CliRunner().invoke(main, ["render", "inventory.py", "deploys/eagle3.py", "spark-01"])
    assert result.exit_code == 0, result.output
    assert "# ==> /var/lib/specfleet/current/extra-llm-api-config.yml <==" in result.output
    assert "# ==> /etc/specfleet/hf_token <==" in result.output and "<redacted" in result.output
    assert TOKEN not in result.output


# ---- `specfleet render`: every file each deploy writes, on every role --------------------------------------------
def _render(deploy: str, host: str) -> tuple[int, dict[str, str], dict[str, str], str]:
    """(exit code, path -> content shown, path -> why not shown, output) of `specfleet render`."""
    result = CliRunner().invoke(main, ["render", "inventory.py", deploy, host])
    shown: dict[str, str] = {}
    named: dict[str, str] = {}
    path, listing = None, False
    for line in result.output.splitlines(keepends=True):
        if line.startswith("# not shown (their content is not known on the controller):"):
            listing = True
        elif listing:
            where, why = line[4:].rstrip("\n").split(": ", 1)
            named[where] = why
        elif line.startswith("# ==> ") and line.rstrip().endswith(" <=="):
            path = line[len("# ==> "):-len(" <==\n")]
            shown[path] = ""
        elif path is not None:
            shown[path] += line
    return result.exit_code, shown, named, result.output


def _plans_of(fleet_path, profile):
    from specfleet.fleet.inventory import load_inventory
    from specfleet.plan import build_plans
    return build_plans(load_inventory(fleet_path), profile)


def test_render_shows_or_names_every_file_the_converge_manages_on_each_role(fleet_file, monkeypatch):
    """For a fleet with every role, each host's render of its deploy covers every file the converge's one status read
    wants there (fleet/steps/state.wanted_files): shown with its exact content, or named, itself or its directory.
    A Hub mirror host gets its mirror's files and no serving unit; a gateway's key map and TLS pair are not shown."""
    from specfleet.fleet.status import sha256
    from specfleet.fleet.steps.state import wanted_files
    from tests.unit import fakefleet
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
    path = fleet_file(fakefleet.FLEET)
    for deploy, profile, hosts in (("deploys/eagle3.py", "eagle3", ("spark-01", "spark-02", "mirror-01")),
                                   ("deploys/qwen3_eagle3_pair.py", "qwen3_eagle3_pair", ("spark-03", "spark-04"))):
        plans = _plans_of(path, profile)
        for host in hosts:
            code, shown, named, out = _render(deploy, host)
            assert code == 0, out
            assert TOKEN not in out
            if plans[host].is_mirror:  # its converge is the mirror's (mirror/steps/hub.py), read by its own status
                from specfleet.mirror.render import mirror_files
                from specfleet.mirror.steps.hub import host_files
                assert set(mirror_files(plans[host].settings, plans[host].connection)) <= set(shown), sorted(shown)
                assert all(path.rsplit("/", 1)[0] in named for path in host_files(plans[host])), sorted(named)
                continue
            rdir = plans[host].paths.release_dir(plans[host].release_id) if plans[host].settings.profile else None
            for want_path, want in wanted_files(plans[host]).items():
                if want.kind != "file":
                    continue
                if rdir and want_path.startswith(rdir + "/") and not want_path.endswith("/release.json"):
                    want_path = plans[host].paths.current_file(want_path[len(rdir) + 1:])  # shown through `current`
                if want_path in shown and want.sha256 is not None and not want_path.endswith("hf_token"):
                    assert want.sha256 == sha256(shown[want_path]), (host, want_path)
                    continue
                covered = want_path in shown or any(want_path == n or want_path.startswith(n.rstrip("/") + "/")
                                                    for n in named)
                assert covered, (deploy, host, want_path, sorted(shown), sorted(named))
    code, shown, named, out = _render("deploys/eagle3.py", "mirror-01")
    assert not any(p.endswith(".service") and "specfleet-trtllm" in p for p in shown), sorted(shown)
    assert any("hub-mirror" in p for p in shown), sorted(shown)
    code, shown, named, out = _render("deploys/gateway.py", "gw-1")
    assert code == 0 and any(p.endswith("haproxy.cfg") for p in shown), out
    assert fakefleet.GATEWAY_KEY not in out and all(shown[p].strip() == "<root-only: not shown>"
                                                   for p in shown if p.endswith(("keys.map", ".pem"))), out
    code, shown, named, out = _render("deploys/hub_mirror.py", "mirror-01")
    assert code == 0 and any("hub-mirror" in p for p in shown), out
    code, _, _, out = _render("deploys/cleanup.py", "spark-01")
    assert code == 0 and out.startswith("# deploys/cleanup.py writes no file on spark-01"), out
    code, _, _, out = _render("deploys/gateway.py", "spark-01")
    assert code == 2 and "spark-01: deploys/gateway.py writes nothing there (not a gateway host" in out, out
