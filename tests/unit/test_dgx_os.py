"""DGX OS 7 (Ubuntu 24.04) differences, each on pyinfra's @fake connector (docs/dgx-os.md: "DGX OS 7 (Ubuntu 24.04)
differences"): docker's default runtime is nvidia, the --gpus hook, docker's AppArmor profile, the dpkg lock held
by unattended-upgrades while python3-venv is still to install, and docker's root on the same disk as data_dir."""

from __future__ import annotations

import logging

import pytest

from specfleet.fleet.status import SpecfleetHost
from specfleet.fleet.steps.tools import DPKG_LOCK_TIMEOUT_SEC
from specfleet.serving.render import unit_text
from specfleet.steps import converge
from tests.unit.fakehost import SPECFLEET_FACT, changed_ops, converged_responses, executed, make_plans, run_deploy

GB = 1_000_000_000
DGX_RUNTIMES = '{"io.containerd.runc.v2":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}'
SECURITY = '["name=apparmor","name=seccomp,profile=builtin","name=cgroupns"]'
# What a converged DGX OS 7 Spark adds to the status fact (docker 28 with NVIDIA's daemon.json).
DGX_LINES = ["default_runtime\tnvidia", f"docker_security\t{SECURITY}", "gpu_hook\t/usr/bin/nvidia-container-runtime-hook",
             "apparmor\tY\t1\t/usr/sbin/apparmor_parser", "dpkg_busy\t"]


def _responses(extra_lines=(), fail=True, **status):
    def responses(plan):
        r = converged_responses(plan, **{"runtimes": DGX_RUNTIMES, **status})
        r[SPECFLEET_FACT] = [*r[SPECFLEET_FACT], *DGX_LINES, *extra_lines]
        return {"exit 1": {"success": False, "stderr": "preflight failed"}, **r} if fail else r
    return responses


def _run(responses, profile="eagle3", **vars):
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"], **vars}}, profile)
    state = run_deploy(plans, converge, profile, responses=responses)
    cmds = executed(state)["spark-01"]
    refusals = [c for c in cmds if "exit 1" in c and "preflight" in c]
    return plans["spark-01"], state, cmds, refusals


def test_status_fact_parses_the_new_lines():
    st = SpecfleetHost().process(["docker\tok", "default_runtime\tnvidia", f"docker_security\t{SECURITY}",
                                  "gpu_hook\t", "apparmor\tY\t0\t", "dpkg_busy\tapt unattended-upgr ",
                                  "docker_root\t123456\tsame\t/var/lib/docker"]).platform
    assert st.default_runtime == "nvidia" and "apparmor" in st.docker_security
    assert st.gpu_hook == "" and st.apparmor == ("Y", "0", "") and st.dpkg_busy == ["apt", "unattended-upgr"]
    assert (st.docker_root, st.docker_root_free, st.docker_root_same_fs) == ("/var/lib/docker", 123456, True)
    old = SpecfleetHost().process(["docker\tok"]).platform  # an older fact output: everything unknown, nothing refused
    assert old.gpu_hook is None and old.apparmor is None and old.docker_root_same_fs is None


def test_nvidia_as_default_runtime_is_accepted_and_gpus_all_stays():
    """DGX OS 7 ships /etc/docker/daemon.json with "default-runtime": "nvidia"; the converged host changes nothing."""
    plan, state, cmds, refusals = _run(_responses())
    assert refusals == [] and not state.failed_hosts
    assert changed_ops(state)["spark-01"] == []
    assert "--gpus=all" in unit_text(plan.settings)


def test_gpus_without_the_prestart_hook_is_refused():
    _, state, _, refusals = _run(_responses(["gpu_hook\t"]))
    assert len(refusals) == 1 and "nvidia-container-runtime-hook is not installed" in refusals[0]
    assert [h.name for h in state.failed_hosts] == ["@fake/spark-01"]


def test_gpus_false_needs_neither_runtime_nor_hook():
    _, state, _, refusals = _run(_responses(["gpu_hook\t"], runtimes='{"runc":{"path":"runc"}}'), gpus=False)
    assert refusals == [] and not state.failed_hosts


def test_no_nvidia_runtime_names_the_host():
    _, _, _, refusals = _run(_responses(["default_runtime\trunc"], runtimes='{"runc":{"path":"runc"}}'))
    assert len(refusals) == 1
    assert "spark-01: preflight: gpus is true but docker has no nvidia runtime" in refusals[0]


@pytest.mark.parametrize("apparmor,refused", [
    ("Y\t0\t", True),                            # profile not loaded and docker cannot load it
    ("Y\t0\t/usr/sbin/apparmor_parser", False),  # docker loads docker-default before the container starts
    ("Y\t1\t", False),                           # loaded
    ("N\t\t", False),                            # AppArmor off in the kernel
])
def test_docker_default_apparmor_profile(apparmor, refused):
    _, state, _, refusals = _run(_responses([f"apparmor\t{apparmor}"]))
    if refused:
        assert len(refusals) == 1 and "docker-default profile is not loaded and apparmor_parser is missing" in refusals[0]
    else:
        assert refusals == [] and not state.failed_hosts


def test_apparmor_not_used_by_docker_is_not_checked():
    _, state, _, refusals = _run(_responses(["apparmor\tY\t0\t", 'docker_security\t["name=seccomp,profile=builtin"]']))
    assert refusals == [] and not state.failed_hosts


def _fresh_venv(plan):
    """A host without the fetch virtualenv and without python3-venv (DGX OS 7 out of the box)."""
    return {"hub_client": ""}


@pytest.mark.parametrize("busy", ["unattended-upgr", ""])
def test_python3_venv_install_waits_for_the_dpkg_lock(busy, caplog):
    def responses(plan):
        r = _responses([f"dpkg_busy\t{busy}"], fail=False, **_fresh_venv(plan))(plan)
        r.pop("dpkg -l")  # python3-venv not installed
        r.pop("pip freeze")
        return r
    caplog.set_level(logging.INFO, logger="pyinfra")
    _, state, cmds, refusals = _run(responses)
    assert refusals == [] and not state.failed_hosts
    installs = [c for c in cmds if "apt-get" in c and " install " in c and "python3-venv" in c]
    assert len(installs) == 1 and f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}" in installs[0], installs
    said = [r.getMessage() for r in caplog.records if "dpkg is busy" in r.getMessage()]
    if busy:
        assert said and "unattended-upgr" in said[0] and f"up to {DPKG_LOCK_TIMEOUT_SEC} s" in said[0]
    else:
        assert not said


def _missing_model(plan):
    snap = plan.paths.snapshot(plan.pins["target"].repo, plan.pins["target"].commit)
    return {f"{snap}/model-00001-of-00002.safetensors": -1}  # 2000 bytes still to fetch


@pytest.mark.parametrize("image,root,free,docker_free,message", [
    # image still to pull, the lock records no size for it, docker's root on the data_dir disk: models + image_size_gb
    # + headroom must fit
    ("", "same", 30 * GB, 30 * GB, "GB of models to fetch + 25 GB image to pull (image_size_gb: the lock records no size for it; the docker root dir /var/lib/docker is on the same filesystem) + 20 GB headroom"),
    ("", "same", 46 * GB, 46 * GB, None),
    # the image is there: only models + headroom
    ("sha256:" + "c" * 64, "same", 21 * GB, 21 * GB, None),
    # docker's root on its own disk: the image must fit there, the models on the data_dir disk
    ("", "other", 21 * GB, 100 * GB, None),
])
def test_disk_preflight_counts_the_image_still_to_pull(image, root, free, docker_free, message):
    def responses(plan):
        return _responses([f"docker_root\t{docker_free}\t{root}\t/var/lib/docker"], image=image, free=free,
                          sizes=_missing_model(plan))(plan)
    _, state, _, refusals = _run(responses)
    if message:
        assert len(refusals) == 1 and "not enough disk under /var/lib/specfleet: 0.0 GB" in refusals[0], refusals
        assert message in refusals[0], refusals[0]
    else:
        assert refusals == [], refusals


def test_image_too_big_for_a_separate_docker_root_is_refused():
    def responses(plan):
        return _responses([f"docker_root\t{10 * GB}\tother\t/srv/docker"], image="", free=500 * GB,
                          sizes=_missing_model(plan))(plan)
    _, _, _, refusals = _run(responses)
    assert len(refusals) == 1
    assert "not enough disk under the docker root dir /srv/docker for the image to pull: 25 GB (image_size_gb: the lock records no size for it), 10.0 GB free" in refusals[0]


def _pinned(plan, platforms):
    """The plan as the lock pins its image: by digest, with the lock's compressed size per platform (or none)."""
    plan.image_digest = "sha256:" + "d" * 64
    plan.image_upstream = f"{plan.settings.image.partition(':')[0]}@{plan.image_digest}"
    plan.image_platforms = platforms


@pytest.mark.parametrize("bytes_, root, message", [
    # the lock's 3 GB for linux/arm64 (the host's aarch64), not image_size_gb's 25: 0 + 3 + 20 fit in 30
    (3 * GB, "same", None),
    (12 * GB, "same", "0.0 GB of models to fetch + 12.00 GB image to pull (the lock's linux/arm64 size; the docker root dir /var/lib/docker is on the same filesystem) + 20 GB headroom (disk_headroom_gb), 30.0 GB free"),
    (31 * GB, "other", "not enough disk under the docker root dir /var/lib/docker for the image to pull: 31.00 GB (the lock's linux/arm64 size), 30.0 GB free"),
])
def test_disk_preflight_counts_the_locks_bytes_for_the_hosts_platform(bytes_, root, message):
    plans = make_plans({"spark-01": {"operator_users": ["nvidia"]}}, "eagle3")
    _pinned(plans["spark-01"], {"linux/arm64": {"digest": "sha256:" + "a" * 64, "bytes": bytes_},
                                "linux/amd64": {"digest": "sha256:" + "b" * 64, "bytes": 90 * GB}})

    def responses(plan):
        return _responses([f"docker_root\t{30 * GB}\t{root}\t/var/lib/docker"], image="", free=30 * GB,
                          sizes=_missing_model(plan))(plan)
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    refusals = [c.replace("'\"'\"'", "'") for c in executed(state)["spark-01"] if "exit 1" in c and "preflight" in c]
    if message is None:
        assert refusals == [], refusals
    else:
        assert len(refusals) == 1 and message in refusals[0], refusals


def test_image_size_gb_is_a_variable():
    def responses(plan):
        return _responses([f"docker_root\t{30 * GB}\tsame\t/var/lib/docker"], image="", free=30 * GB,
                          sizes=_missing_model(plan))(plan)
    _, _, _, refusals = _run(responses, image_size_gb=5)
    assert refusals == []
