"""The host side of the in-image config validation (validate_in_image.host_command), run with sh against a
fake `docker` on PATH: verdict cache, last line of the container's output, the refusal line."""

from __future__ import annotations

import os
import stat
import subprocess

from specfleet.serving.contract import CONTRACTS
from specfleet.serving.validate import SCRIPT, config_key, host_command, verdict_name

IMAGE_ID = "sha256:" + "ab" * 32
CONFIG = "enable_autotuner: false\n"
FAKE_DOCKER = """#!/bin/sh
echo "$*" >> "$LOG"
if [ "$1 $2" = "image inspect" ]; then echo "$ID"; exit 0; fi
printf '%s\\n' "[TensorRT-LLM] TensorRT-LLM version: 1.2.0rc6" "$ANSWER"; exit "$RC"
"""


def _run(tmp_path, answer="OK", rc=0, gpus=False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    data = tmp_path / "data"
    cmd = host_command("spark-01", str(data), str(tmp_path / "cfg.yml"), CONFIG, "img:1.2.0rc6", gpus,
                       CONTRACTS["1.2.0rc6"])
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "ID": IMAGE_ID,
           "ANSWER": answer, "RC": str(rc)}
    r = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=30)
    log = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return r, data / "validated" / verdict_name(CONFIG, IMAGE_ID), log


def test_ok_is_cached_and_a_cached_verdict_runs_no_container(tmp_path):
    r, verdict, log = _run(tmp_path)
    assert r.returncode == 0 and verdict.exists() and verdict.name == f"{config_key(CONFIG)}-{'ab' * 6}"
    assert log.count("run --rm --pull=never --network none --entrypoint python3 -v ") == 1 and "--gpus" not in log
    assert f"{tmp_path}/cfg.yml:/tmp/specfleet-config.yml:ro img:1.2.0rc6 -c" in log
    assert log.rstrip().endswith(" tensorrt_llm.llmapi.llm_args TorchLlmArgs update_llm_args_with_extra_dict")
    (tmp_path / "log").unlink()
    r, _, log = _run(tmp_path, answer="ValueError: would refuse", rc=1)
    assert r.returncode == 0 and "run " not in log


def test_refusal_is_one_line_naming_host_image_and_error(tmp_path):
    r, verdict, _ = _run(tmp_path, answer="ValidationError: 1 validation error for TorchLlmArgs x: Extra inputs", rc=1)
    assert r.returncode == 1 and not verdict.exists()
    assert r.stderr.strip() == ("spark-01: extra_llm_api_options: refused by img:1.2.0rc6's own TensorRT-LLM: "
                                "ValidationError: 1 validation error for TorchLlmArgs x: Extra inputs")


def test_exit_zero_without_ok_is_not_a_verdict(tmp_path):
    r, verdict, _ = _run(tmp_path, answer="something else", rc=0)
    assert r.returncode == 1 and not verdict.exists() and "own TensorRT-LLM: something else" in r.stderr


def test_gpus_mirrors_the_service(tmp_path):
    _, _, log = _run(tmp_path, gpus=True)
    assert "--network none --gpus=all --entrypoint python3" in log


def test_script_is_what_serve_does():
    assert "yaml.safe_load" in SCRIPT and "update_llm_args_with_extra_dict(" in SCRIPT and "TorchLlmArgs(**args)" in SCRIPT
    assert '"backend": "pytorch"' in SCRIPT
