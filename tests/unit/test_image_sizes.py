"""An image's compressed size per platform (pins/image_sizes.py) against a tiny in-process registry, the lock file's
`platforms` table (written, read back, and absent in a lock written before it), and what `specfleet check` prints."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.fleet.inventory import load_inventory
from specfleet.pins.image_sizes import NoSizes, platform_sizes
from specfleet.pins.lockfile import Lock, LockedModel, LockError, dump_lock, lock_path, read_lock, shown, write_lock
from specfleet.plan import build_plans
from tests.unit.fake_registry import OCI_MANIFEST, FakeRegistry

ARM64, AMD64 = {"architecture": "arm64", "os": "linux"}, {"architecture": "amd64", "os": "linux"}
ARM64_V8 = {**ARM64, "variant": "v8"}
UNKNOWN = {"architecture": "unknown", "os": "unknown"}
NAME = "nvidia/tensorrt-llm/release"


@pytest.fixture
def registry():
    reg = FakeRegistry()
    yield reg
    reg.close()


def _gets(reg: FakeRegistry) -> list[str]:
    """The paths GET asked for, once each (the first request is asked again with the pull token)."""
    return list(dict.fromkeys(path for method, path, _ in reg.seen if method == "GET" and not path.startswith("/token")))


def test_each_platform_of_an_index_weighs_its_config_and_layers(registry):
    arm, amd = registry.image(ARM64, [21_000_000_000, 300_000_000]), registry.image(AMD64, [100_000_000, 20_000_000])
    index = registry.index([arm, amd])
    assert platform_sizes(f"{registry.host}/{NAME}:1.2.0rc6", index) == {
        "linux/amd64": {"digest": amd["digest"], "bytes": amd["config_size"] + 120_000_000},
        "linux/arm64": {"digest": arm["digest"], "bytes": arm["config_size"] + 21_300_000_000},
    }
    # the index and one manifest per platform, by digest, with one pull token; no blob (layer, config) is downloaded
    assert sum(path.startswith("/token") for _, path, _ in registry.seen) == 1
    assert _gets(registry) == [f"/v2/{NAME}/manifests/{d}" for d in (index, arm["digest"], amd["digest"])]


def test_attestation_manifests_are_no_platform(registry):
    arm = registry.image(ARM64, [1000])
    attestation = {**registry.image(UNKNOWN, [50]),
                   "annotations": {"vnd.docker.reference.type": "attestation-manifest",
                                   "vnd.docker.reference.digest": arm["digest"]}}
    unannotated = registry.image(UNKNOWN, [60])  # unknown/unknown without the annotation is no platform either
    index = registry.index([arm, attestation, unannotated])
    assert list(platform_sizes(f"{registry.host}/{NAME}:1", index)) == ["linux/arm64"]
    assert not {f"/v2/{NAME}/manifests/{e['digest']}" for e in (attestation, unannotated)} & set(_gets(registry))


def test_a_single_manifest_image_reads_its_platform_from_its_config(registry):
    entry = registry.image(ARM64_V8, [700, 300])
    sizes = platform_sizes(f"{registry.host}/{NAME}:single", entry["digest"])
    assert sizes == {"linux/arm64/v8": {"digest": entry["digest"], "bytes": entry["config_size"] + 1000}}
    assert [p for p in _gets(registry) if "/blobs/" in p] == [f"/v2/{NAME}/blobs/{_config_of(registry, entry)}"]


def _config_of(registry: FakeRegistry, entry: dict) -> str:
    return yaml.safe_load(registry.contents[entry["digest"]][1])["config"]["digest"]


def test_a_registry_that_cannot_answer_is_no_sizes(registry):
    index = registry.index([registry.image(ARM64, [1000])])
    ref = f"{registry.host}/{NAME}:1"
    registry.failing = 500
    with pytest.raises(NoSizes, match=r"answered HTTP 500"):
        platform_sizes(ref, index)
    registry.failing = None
    with pytest.raises(NoSizes, match=r"HTTP 404"):
        platform_sizes(ref, "sha256:" + "0" * 64)
    # a body that is not what the digest names
    registry.contents["sha256:" + "1" * 64] = (OCI_MANIFEST, registry.contents[index][1])
    with pytest.raises(NoSizes, match="does not match that digest"):
        platform_sizes(ref, "sha256:" + "1" * 64)
    with pytest.raises(NoSizes, match="cannot reach"):
        platform_sizes(f"127.0.0.1:9/{NAME}:1", index, timeout=5)


# ---- the lock file's `platforms` ---------------------------------------------------------------------------------
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"
PINNED = "sha256:" + "4f" * 32
SIZES = {"linux/amd64": {"digest": "sha256:" + "a" * 64, "bytes": 120_000_000},
         "linux/arm64": {"digest": "sha256:" + "b" * 64, "bytes": 21_300_000_000}}


def test_a_lock_round_trips_its_sizes(tmp_path):
    lock = Lock(models={("org/m", "main"): LockedModel("c" * 40, ("*.pth",), (("a.json", 10, "d" * 40),), 10)},
                images={IMAGE: {"image_digest": PINNED, "platforms": SIZES},
                        "old/image:1": {"image_digest": PINNED},
                        "local/image:1": {"image_digest": None, "note": "not pinned: no registry"}})
    path = tmp_path / "fleet.yml.lock"
    write_lock(path, lock, "fleet.yml")
    assert read_lock(path) == lock
    assert dump_lock(read_lock(path), "fleet.yml") == path.read_text()
    assert f"      linux/arm64: {{digest: '{SIZES['linux/arm64']['digest']}', bytes: 21300000000}}" \
        in path.read_text().splitlines()


def test_a_lock_written_before_sizes_still_reads(fleet_file):
    path = fleet_file("all:\n  hosts:\n    spark-01:\n")
    doc = yaml.safe_load(lock_path(path).read_text())
    assert doc["version"] == 1
    doc["images"] = {IMAGE: {"image_digest": PINNED}}
    lock_path(path).write_text(yaml.safe_dump(doc))
    assert read_lock(lock_path(path)).images == {IMAGE: {"image_digest": PINNED}}
    plan = build_plans(load_inventory(path), "eagle3")["spark-01"]
    assert (plan.image_digest, plan.image_platforms) == (PINNED, None)


def test_a_malformed_size_is_one_line(tmp_path):
    path = tmp_path / "fleet.yml.lock"
    path.write_text(f"version: 1\nimages:\n  {IMAGE}: {{image_digest: '{PINNED}', "
                    "platforms: {linux/arm64: {digest: 'sha256:nope', bytes: 1}}}\n")
    with pytest.raises(LockError, match="malformed entry .*platforms.linux/arm64.digest"):
        read_lock(path)


# ---- `specfleet check` -------------------------------------------------------------------------------------------
def _check_with(fleet_file, entry: dict) -> tuple[str, list[str]]:
    """(the lock file as check names it, the image lines of `specfleet check` with `entry` as the image's)."""
    path = fleet_file("all:\n  hosts:\n    spark-01:\n    spark-02:\n")
    doc = yaml.safe_load(lock_path(path).read_text())
    doc["images"] = {IMAGE: entry}
    lock_path(path).write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output
    return shown(lock_path(path)), [line for line in result.output.splitlines() if line.lstrip().startswith("image ")]


def test_check_prints_each_image_once_with_its_size_per_platform(fleet_file):
    assert _check_with(fleet_file, {"image_digest": PINNED, "platforms": SIZES})[1] == [
        f"  image nvcr.io/nvidia/tensorrt-llm/release@{PINNED}: linux/amd64 0.12 GB, linux/arm64 21.30 GB"]


def test_check_says_when_the_lock_predates_image_sizes(fleet_file):
    where, lines = _check_with(fleet_file, {"image_digest": PINNED})
    assert lines == [f"  image nvcr.io/nvidia/tensorrt-llm/release@{PINNED}: size unknown: {where} predates image "
                     "sizes (run: specfleet lock inventory.py)"]
    assert _check_with(fleet_file, {"image_digest": None, "note": "not pinned: docker load"})[1] == [
        f"  image {IMAGE}: size unknown: not pinned to a registry digest (run by its tag)"]
