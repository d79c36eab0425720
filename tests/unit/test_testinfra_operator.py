"""The testinfra suite against a host reached as an operator with sudo (the VM fleet, DGX OS), and its real-GPU
tier on a host with the VM fleet's stand-in NVIDIA toolkit: checked with a fake testinfra host (no SSH)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from specfleet.testinfra import converged, real_gpu
from specfleet.testinfra.fixtures import Spark


class FakeHost:
    def __init__(self, answers: dict[str, str]):
        self.answers, self.sudo_depth, self.ran = answers, 0, []

    @contextlib.contextmanager
    def sudo(self):
        self.sudo_depth += 1
        try:
            yield
        finally:
            self.sudo_depth -= 1

    def run(self, cmd):
        self.ran.append((cmd, self.sudo_depth > 0))
        out = next((v for k, v in self.answers.items() if k in cmd), "")
        return SimpleNamespace(rc=0, stdout=out, stderr="")

    def user(self, name):
        return SimpleNamespace(groups=[name, "docker"])


def _spark(host, gpus=True, users=("spark",)):
    s = SimpleNamespace(gpus=gpus, operator_users=list(users), serving_unit="specfleet-trtllm")
    return SimpleNamespace(name="spark-1", host=host, s=s, plan=SimpleNamespace(settings=s))


def test_su_to_an_operator_runs_with_sudo():
    host = FakeHost({"su - spark": "specfleet-trtllm\n"})
    converged.test_operators_in_docker_group_and_can_use_docker(_spark(host))
    assert [(cmd, sudo) for cmd, sudo in host.ran if cmd.startswith("su - ")] == [
        ("su - spark -c 'docker ps --format {{.Names}}'", True)]


def _gpu_spark(spark):
    return real_gpu.gpu_spark.__wrapped__(spark)


def test_real_gpu_tier_skips_the_standin_toolkit():
    host = FakeHost({"nvidia-container-runtime-hook --version":
                     "nvidia-container-runtime-hook STAND-IN (specfleet VM fleet): no GPU, does nothing\n"})
    with pytest.raises(pytest.skip.Exception, match="stand-in"):
        _gpu_spark(_spark(host))


def test_real_gpu_tier_runs_on_a_real_toolkit_and_skips_gpus_false():
    real = FakeHost({"nvidia-container-runtime-hook --version": "NVIDIA Container Runtime Hook version 1.17.8\n"})
    spark = _spark(real)
    assert _gpu_spark(spark) is spark
    with pytest.raises(pytest.skip.Exception, match="gpus is false"):
        _gpu_spark(_spark(real, gpus=False))


def _paired(role, gate):
    return Spark("spark-2", FakeHost({}), None, {"id": "r-000000000002", **({"pair": {"role": role}} if role else {})},
                 gate)


@pytest.mark.parametrize("check", [converged.test_port_listening_on_the_configured_address,
                                   converged.test_models_endpoint_lists_the_model,
                                   converged.test_completion_returns_text,
                                   real_gpu.test_train_prompt_at_temperature_zero_answers_276,
                                   real_gpu.test_metrics_show_draft_acceptance])
def test_a_pairs_worker_skips_the_endpoint_checks(check):
    with pytest.raises(pytest.skip.Exception, match="the pair serves through its head"):
        check(_paired("worker", {}))


def test_the_gate_check_wants_the_current_release_passed_and_a_workers_side_as_a_worker():
    converged.test_the_gate_passed_for_the_current_release(
        _paired("worker", {"release": "r-000000000002", "result": "passed", "role": "worker"}))
    converged.test_the_gate_passed_for_the_current_release(
        _paired(None, {"release": "r-000000000002", "result": "passed"}))
    for role, gate in (("worker", {"release": "r-000000000001", "result": "passed", "role": "worker"}),
                       ("worker", {"release": "r-000000000002", "result": "running", "role": "worker"}),
                       ("worker", {"release": "r-000000000002", "result": "passed"}),
                       (None, {}), ("head", {"release": "r-000000000002", "result": "passed", "role": "worker"})):
        with pytest.raises(AssertionError):
            converged.test_the_gate_passed_for_the_current_release(_paired(role, gate))
