"""Real-GPU tier: only against real DGX Sparks (hosts whose settings say gpus: true).

Collected through a project's tests/infra/test_real_gpu.py (`from specfleet.testinfra.real_gpu import *`)."""

from __future__ import annotations

import json
import re

import pytest

from ..engines.catalog import speculative
from ..overview.host.overview import counter_sums

pytestmark = pytest.mark.real_gpu


@pytest.fixture
def gpu_spark(spark):
    if not spark.s.gpus:
        pytest.skip(f"{spark.name}: gpus is false (not a real Spark)")
    hook = spark.host.run("nvidia-container-runtime-hook --version </dev/null")
    if "STAND-IN" in hook.stdout:  # the VM lab's stand-in toolkit (lab/specfleet_lab/hooks/customize.sh): no GPU
        pytest.skip(f"{spark.name}: the NVIDIA container toolkit is specfleet's stand-in (no GPU)")
    return spark


def test_nvidia_smi_in_the_container(gpu_spark):
    with gpu_spark.host.sudo():
        out = gpu_spark.host.check_output(f"docker exec {gpu_spark.s.serving_unit} nvidia-smi -L")
    assert "GPU 0" in out


def test_train_prompt_at_temperature_zero_answers_276(gpu_spark):
    gpu_spark.skip_a_worker()
    smoke = json.loads(gpu_spark.host.file(f"{gpu_spark.plan.paths.current}/smoke.json").content_string)
    if "train" not in smoke["prompt"]:
        pytest.skip("this profile's smoke prompt is not the train-distance problem")
    body = json.dumps({**smoke, "temperature": 0}).replace("'", "'\\''")
    out = json.loads(gpu_spark.host.check_output(
        f"curl -fsS -m 600 {gpu_spark.release['url']}/v1/completions -H 'Content-Type: application/json' -d '{body}'"))
    assert re.search(r"\b276\b", out["choices"][0]["text"]), out["choices"][0]["text"]


def test_metrics_show_draft_acceptance(gpu_spark):
    """The server's own counters show accepted drafts after a completion, where its engine counts them
    (Engine.counters: vLLM's Prometheus counters, trtllm-serve's JSON iteration stats)."""
    gpu_spark.skip_a_worker()
    s = gpu_spark.plan.settings
    if not speculative(s.profile):
        pytest.skip("no speculation in this profile")
    counters = s.engine.counters
    if not counters.scrapable and not s.llm_api_options.get("enable_iter_perf_stats"):
        pytest.skip("set extra_llm_api_options.enable_iter_perf_stats: true to collect /metrics")
    url = gpu_spark.release["url"]
    gpu_spark.host.check_output(f"curl -fsS -m 300 {url}/v1/completions -H 'Content-Type: application/json' "
                                f"-d '{{\"model\": \"{gpu_spark.release['served_model']}\", "
                                f"\"prompt\": \"Count to twenty:\", \"max_tokens\": 64}}'")
    text = gpu_spark.host.check_output(f"curl -fsS -m 30 {url}{counters.path}")
    if counters.scrapable:
        sums = counter_sums(text, [counters.drafts, counters.draft_tokens, counters.accepted])
        assert sums.get(counters.accepted, 0) > 0, sums
        return
    stats = json.loads(text)
    spec = [s["specDecodingStats"] for s in stats if s.get("specDecodingStats")]
    assert spec and sum(s.get("numAcceptedTokens", 0) for s in spec) > 0, stats[-3:]
