"""Pinned images through the mirror's registry: how a Spark gets its image (pull_of: nothing, a tag, a pull from the
mirror by its platform's digest, from upstream, or a refusal), the mirror's one fetch of what the run's Sparks lack,
and the converge on pyinfra's @fake connector: the fetch before every pull, the Sparks' trust of the registry, the
NGC key only as a path, and a mirror that failed (refused, or image_fallback)."""

from types import SimpleNamespace

import pytest
import yaml

from specfleet import defaults
from specfleet.mirror.rules import store_repository
from specfleet.mirror.status import SparkImage, parse_spark_image
from specfleet.mirror.steps.images import Pull, pull_of
from specfleet.pins.lockfile import lock_path
from specfleet.plan import build_plans, load_inventory_or_fail, local_image
from specfleet.steps import converge
from tests.unit import fakehost
from tests.unit.fakehost import SPECFLEET_FACT, converged_responses, executed, run_deploy
from tests.unit.test_image_registry import FLEET
from tests.unit.test_image_registry import _lines as mirror_lines
from tests.unit.test_mirror import MIRROR_FACT

INDEX = "sha256:" + "d" * 64
ARM, AMD = "sha256:" + "a" * 64, "sha256:" + "b" * 64
PLATFORMS = {"linux/arm64": {"digest": ARM, "bytes": 21_300_000_000},
             "linux/amd64": {"digest": AMD, "bytes": 300_000_000}}
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release"


def _plans(fleet_file, all="", mirror="", platforms=PLATFORMS, digest=INDEX):
    path = fleet_file(FLEET.format(all=all, mirror=mirror, spark=""))
    lock = yaml.safe_load(lock_path(path).read_text())
    for ref in lock["images"]:
        lock["images"][ref] = {"image_digest": digest, **({"platforms": platforms} if platforms else {})}
    lock_path(path).write_text(yaml.safe_dump(lock))
    return build_plans(load_inventory_or_fail(), "eagle3", deploying=True)


def _st(image_id="", upstream_id="", arch="aarch64"):
    return SimpleNamespace(release=SimpleNamespace(image_id=image_id), mirror=SparkImage(upstream_id=upstream_id),
                           platform=SimpleNamespace(arch=arch))


# ---- the decision -----------------------------------------------------------------------------------------------
def test_a_pinned_image_runs_as_a_tag_of_its_digest(fleet_file):
    plan = _plans(fleet_file)["spark-01"]
    assert plan.settings.image == f"{IMAGE}:sha256-{'d' * 64}" == local_image(f"{IMAGE}:1.3.0rc12", INDEX)
    assert plan.image_upstream == f"{IMAGE}@{INDEX}"


@pytest.mark.parametrize("st, kind, ref, size", [
    (_st(image_id="sha256:" + "c" * 64), "none", None, 0),
    (_st(upstream_id="sha256:" + "c" * 64), "tag", f"{IMAGE}@{INDEX}", 0),
    (_st(), "mirror", f"10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release@{ARM}", 21_300_000_000),
    (_st(arch="x86_64"), "mirror", f"10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release@{AMD}", 300_000_000),
    (_st(arch="riscv64"), "refused", f"{IMAGE}@{INDEX}", None),
])
def test_how_a_spark_gets_its_image(fleet_file, st, kind, ref, size):
    pull = pull_of(_plans(fleet_file)["spark-01"], st)
    assert (pull.kind, pull.bytes) == (kind, size) and (ref is None or pull.ref == ref), pull


def test_without_the_mirror_the_pull_is_from_upstream_by_digest(fleet_file):
    pull = pull_of(_plans(fleet_file, all=", image_mirror: false")["spark-01"], _st())
    assert pull == Pull("upstream", f"{IMAGE}@{INDEX}", 21_300_000_000, "(linux/arm64) from nvcr.io")
    assert pull.line() == f"pull image {IMAGE}@{INDEX} (21.30 GB) (linux/arm64) from nvcr.io"


def test_an_older_lock_cannot_pull_through_the_mirror(fleet_file):
    pull = pull_of(_plans(fleet_file, platforms=None)["spark-01"], _st())
    assert pull.kind == "refused" and "the lock records no image sizes (run: specfleet lock inventory.py)" in pull.why


def test_an_unpinned_image_is_pulled_as_today_and_the_plan_says_why(fleet_file):
    pull = pull_of(_plans(fleet_file, digest=None, platforms=None)["spark-01"], _st())
    assert pull.kind == "tag-less" and pull.ref == defaults.image
    assert "not pinned in the lock: the mirror serves pinned digests only" in pull.line()


def test_store_repository_keeps_upstreams_apart():
    assert store_repository("nvcr.io/nvidia/x") == "nvcr.io/nvidia/x"
    assert store_repository("10.0.0.1:5443/nvidia/x") == "10.0.0.1_5443/nvidia/x"


def test_the_status_part_reads_the_upstream_image_and_dockerds_plain_http_registries():
    st = parse_spark_image([("image_upstream", "sha256:" + "e" * 64),
                            ("image_registries", '{"docker.io":{"Secure":true},"10.1.0.5:5000":{"Secure":false}}')])
    assert st.upstream_id == "sha256:" + "e" * 64 and st.insecure == ("10.1.0.5:5000",)
    assert parse_spark_image([("image_registries", "not json")]).insecure == ()


# ---- the converge -----------------------------------------------------------------------------------------------
def _responses(plan, spark_lines=(), fetch_ok=True, registry="converged"):
    if plan.is_mirror:
        out = {MIRROR_FACT: mirror_lines(plan, registry)}
        if not fetch_ok:
            out["job status"] = '{"id": "j1", "key": "k", "state": "failed", "exit": 1, "message": "image-fetch: x"}'
        return out
    out = converged_responses(plan, image="")  # its release is there, its image is not
    out[SPECFLEET_FACT] = out[SPECFLEET_FACT] + list(spark_lines)
    return out


def _converge(plans, cli=True, **kw):
    state = run_deploy(plans, converge, "eagle3", responses=lambda p: _responses(p, **kw), cli=cli)
    return state, executed(state)


def test_the_mirror_fetches_once_before_the_sparks_pull_from_it(fleet_file):
    plans = _plans(fleet_file)
    state, cmds = _converge(plans)
    assert not state.failed_hosts, state.failed_hosts
    fetch = [c.rpartition(" --writer-config ")[2] for c in cmds["mirror-01"] if "job start" in c and "image-fetch:" in c]
    assert len(fetch) == 1, fetch  # one fetch for both Sparks (both aarch64: one platform manifest)
    assert f" {IMAGE}@{ARM} nvcr.io/nvidia/tensorrt-llm/release 21300000000" in fetch[0]
    assert f"--budget-bytes 100000000000 --keep {ARM},{AMD} " in fetch[0]  # the lock's digests are never evicted
    assert f"@{AMD}" not in fetch[0] and "--authfile" not in fetch[0]
    for spark in ("spark-01", "spark-02"):
        pulls = [c for c in cmds[spark] if "job start" in c and "pull:" in c]
        assert len(pulls) == 1 and f"--pull 10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release@{ARM}" in pulls[0]
        assert f"--tag {IMAGE}:sha256-{'d' * 64}" in pulls[0] and f"--have {IMAGE}@{INDEX}" in pulls[0]
        assert any("--add 10.1.0.5:5000" in c for c in cmds[spark])  # dockerd trusts the registry first
        assert not any("systemctl restart docker" in c for c in cmds[spark])
    order = [state.get_op_meta(h).names for h in state.get_op_order()]
    fetch_at = next(i for i, n in enumerate(order) if any("Image registry: fetch" in x for x in n))
    pull_at = [i for i, n in enumerate(order) if any("pull image" in x for x in n)]
    assert pull_at and fetch_at < min(pull_at)


def test_a_spark_that_trusts_the_registry_already_only_pulls(fleet_file):
    plans = _plans(fleet_file)
    state, cmds = _converge(plans, spark_lines=["image_registries\t{\"10.1.0.5:5000\":{\"Secure\":false}}"])
    assert not state.failed_hosts and not any("--add 10.1.0.5:5000" in c for c in cmds["spark-01"])


def test_a_spark_with_the_digest_pulls_nothing_and_the_mirror_fetches_nothing(fleet_file):
    plans = _plans(fleet_file)
    state, cmds = _converge(plans, spark_lines=[f"image_upstream\tsha256:{'e' * 64}"])
    assert not state.failed_hosts
    assert not any("image-fetch:" in c for c in cmds["mirror-01"])
    pulls = [c for c in cmds["spark-01"] if "job start" in c and "pull:" in c]
    assert len(pulls) == 1 and f"--pull {IMAGE}@{INDEX}" in pulls[0]  # image_pull.py only tags what is there


def test_the_ngc_key_reaches_the_fetch_as_a_path(fleet_file, tmp_path):
    (tmp_path / "ngc.key").write_text("nvapi-SECRET\n")
    plans = _plans(fleet_file, mirror=f", ngc_api_key_file: {tmp_path / 'ngc.key'}")
    state, cmds = _converge(plans)
    fetch = [c.rpartition(" --writer-config ")[2] for c in cmds["mirror-01"] if "image-fetch:" in c and "job start" in c]
    assert "--authfile /etc/specfleet/ngc-auth.json" in fetch[0]
    assert not [c for h in cmds for c in cmds[h] if "nvapi-SECRET" in c]


@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("cli", [True, False], ids=["cli", "python-api"])  # the fetch and a pull: 2 ops, or 1 shared
def test_a_failed_fetch_refuses_the_pull_unless_image_fallback(fleet_file, fallback, cli):
    plans = _plans(fleet_file, all=f", image_fallback: {str(fallback).lower()}")
    state, cmds = _converge(plans, cli=cli, fetch_ok=False)
    pulls = [c for c in cmds["spark-01"] if "job start" in c and "pull:" in c]
    if fallback:
        assert len(pulls) == 1 and f"--pull {IMAGE}@{INDEX}" in pulls[0]
    else:
        assert not pulls and "@fake/spark-01" in {h.name for h in state.failed_hosts}
    # the release is never switched where the image did not arrive (the host keeps serving what it serves)
    assert fallback or not any("activate" in c for c in cmds["spark-01"])


@pytest.mark.parametrize("key", [False, True])
def test_a_spark_refused_by_a_failed_fetch_says_whether_the_mirror_has_an_ngc_key(fleet_file, tmp_path, caplog, key):
    (tmp_path / "ngc.key").write_text("nvapi-SECRET\n")
    plans = _plans(fleet_file, mirror=f", ngc_api_key_file: {tmp_path / 'ngc.key'}" if key else "")
    with caplog.at_level("INFO"):
        _converge(plans, fetch_ok=False)
    lines = [r.getMessage() for r in caplog.records if "spark-01" in r.getMessage() and "not pulling" in r.getMessage()]
    assert len(lines) == 1, lines
    assert ("no ngc_api_key_file" in lines[0]) is not key and "image mirror mirror-01 (10.1.0.5:5000)" in lines[0]


def test_on_a_fresh_mirror_the_registry_starts_then_fetches_then_the_sparks_pull(fleet_file):
    """pyinfra merges each host's operations into one order: the fetch is one operation shared with the Sparks that
    pull from the mirror, so their pulls come after it, and after the registry's setup on the mirror."""
    state, _ = _converge(_plans(fleet_file), registry="none")
    assert not state.failed_hosts, state.failed_hosts
    order = [" ".join(sorted(state.get_op_meta(h).names)) for h in state.get_op_order()]
    start = next(i for i, n in enumerate(order) if "Start specfleet-image-registry" in n)
    fetch = next(i for i, n in enumerate(order) if "Image registry: fetch" in n)
    pulls = [i for i, n in enumerate(order) if "pull image" in n]
    assert len(pulls) == 1 and start < fetch < pulls[0], order  # both Sparks' pulls: one operation


# ---- the registry fails the Spark's pull after the mirror's fetch succeeded ---------------------------------------
MIRROR_PULL = f"pull:10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release@{ARM}"
# the mirror's fetch (job j1) succeeds; the Spark's pull from the registry (job jm) fails as a dead registry fails it
PULL_FAILS = {MIRROR_PULL: '{"id": "jm", "state": "started"}',
              "job status jm": '{"id": "jm", "key": "k", "state": "failed", "exit": 1, "message": "image-pull: '
                               '10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release: connection refused"}'}


@pytest.mark.parametrize("fallback", [False, True])
def test_a_pull_the_registry_fails_after_its_fetch_falls_back_only_with_image_fallback(fleet_file, monkeypatch,
                                                                                        caplog, fallback):
    monkeypatch.setattr(fakehost, "JOB_OK", {**PULL_FAILS, **fakehost.JOB_OK})  # tried first: the Sparks' mirror pull
    plans = _plans(fleet_file, all=f", image_fallback: {str(fallback).lower()}")
    with caplog.at_level("INFO"):
        state, cmds = _converge(plans)
    said = [r.getMessage() for r in caplog.records if "spark-01" in r.getMessage()]
    lines = [m for m in said if "failed after its fetch" in m]
    assert len(lines) == 1, said
    assert "image mirror mirror-01 (10.1.0.5:5000)" in lines[0] and "connection refused" in lines[0]
    assert any("job start" in c and "image-fetch:" in c for c in cmds["mirror-01"])  # the fetch ran, and succeeded
    pulls = [c for c in cmds["spark-01"] if "job start" in c and "pull:" in c]
    assert MIRROR_PULL in pulls[0]
    if fallback:  # pulled from upstream, said so, and the release step goes on with the image
        assert len(pulls) == 2 and f"--pull {IMAGE}@{INDEX}" in pulls[1], pulls
        assert "image_fallback: pulling nvcr.io/nvidia/tensorrt-llm/release@" in lines[0] and "from nvcr.io" in lines[0]
        assert "@fake/spark-01" not in {h.name for h in state.failed_hosts}
        assert any("docker run --rm --pull=never --network none" in c for c in cmds["spark-01"])
    else:  # one line; the host fails here and keeps serving its release: nothing switched
        assert len(pulls) == 1 and "@fake/spark-01" in {h.name for h in state.failed_hosts}
        assert ("not pulling from nvcr.io (image_fallback: true would); this host keeps serving its current release"
                in lines[0])
        assert not any(" activate " in c or "systemctl restart" in c for c in cmds["spark-01"])
        assert [m for m in said if "job jm" in m] == lines  # the job's failure is said in that one line only


# ---- a local tag counts only when its digest is the lock's --------------------------------------------------------
OTHER = "sha256:" + "e" * 64


@pytest.mark.parametrize("rest, found", [
    (f"sha256:{'c' * 64} [\"{IMAGE}@{INDEX}\"]\t{INDEX} {ARM}", "sha256:" + "c" * 64),  # pulled upstream
    (f"sha256:{'c' * 64} [\"10.1.0.5:5000/nvcr.io/x@{ARM}\"]\t{INDEX} {ARM}", "sha256:" + "c" * 64),  # mirror
    (f"sha256:{'c' * 64} [\"{IMAGE}@{OTHER}\"]\t{INDEX} {ARM}", ""),  # a tag moved by hand
    (f"sha256:{'c' * 64} []\t{INDEX} {ARM}", ""),  # `docker tag` of a built image
    (f"\t{INDEX} {ARM}", ""),  # no such image
    (f"sha256:{'c' * 64} []\t", "sha256:" + "c" * 64),  # not pinned: the tag is the reference, as docker has it
])
def test_the_status_read_counts_the_unit_image_only_by_the_locks_digest(rest, found):
    from specfleet.serving.status import parse_image
    assert parse_image(rest) == found


def test_docker_never_pulls_behind_the_image_step(fleet_file):
    """The unit and the in-image check run the image the image step put there: a missing tag fails, never pulls."""
    from specfleet.serving.render import unit_text
    from specfleet.serving.validate import verdict_command
    plan = _plans(fleet_file)["spark-01"]
    run = next(line for line in unit_text(plan.settings).splitlines() if line.startswith("ExecStart=/usr/bin/docker run "))
    assert f" --rm --pull=never --name {plan.settings.serving_unit} " in run, run
    assert "docker run --rm --pull=never --network none" in verdict_command("/d", "c", plan.settings.image, True, [], "")


def test_a_tag_on_another_image_is_pulled_again_and_the_release_waits_for_it(fleet_file):
    """The unit's tag is there, but on an image none of whose RepoDigests the lock records: the converge pulls (the
    pull program moves the tag), and nothing takes the tag's image as the pinned one."""
    plans = _plans(fleet_file, all=", image_mirror: false")

    def responses(plan):
        if plan.is_mirror:
            return {MIRROR_FACT: mirror_lines(plan, "converged")}
        r = converged_responses(plan, repo_digests=[f"{IMAGE}@{OTHER}"])
        return r
    state = run_deploy(plans, converge, "eagle3", responses=responses, cli=True)
    cmds = executed(state)
    assert not state.failed_hosts, state.failed_hosts
    for spark in ("spark-01", "spark-02"):
        pulls = [c for c in cmds[spark] if "job start" in c and "pull:" in c]
        assert len(pulls) == 1 and f"--pull {IMAGE}@{INDEX}" in pulls[0], pulls
        assert f"--digests {INDEX},{AMD},{ARM}" in pulls[0]


def test_the_status_read_and_the_pull_program_share_one_rule():
    """One definition: the status read's parse and the pull program both ask host/docker_images.pinned."""
    from specfleet.fleet.programs import program_text
    from specfleet.host import docker_images
    from specfleet.serving import status
    assert status.pinned is docker_images.pinned
    pull = program_text("image_pull.py")
    assert "from docker_images import " in pull and "pinned(" in pull and "RepoDigests" not in pull.split('"""')[2]
