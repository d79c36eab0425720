"""A Spark removes the images no kept release runs (host/docker_images.remove_unused, from the host tool's prune after
a passed switch), against docker's Engine API STAND-IN (tests/unit/docker_standin.py): the docker root does not grow
with every new image, a rollback still finds its image, and nothing a container, a kept release or someone else's
tag holds is touched."""

from __future__ import annotations

import json
import os

import pytest

from specfleet.host import docker_images
from specfleet.plan import local_image
from specfleet.serving.host.specfleet_host import Host
from tests.unit.docker_standin import DockerStandin, Image

NAME = "nvcr.io/nvidia/tensorrt-llm/release"
MIRROR = "10.1.0.5:5000/nvcr.io/nvidia/tensorrt-llm/release"


def _digest(c: str) -> str:
    return "sha256:" + c * 64


def _tag(c: str) -> str:
    return local_image(f"{NAME}:1.3.0rc12", _digest(c))  # the tag a pinned image runs as


def _id(c: str) -> str:
    return "sha256:" + c * 64


@pytest.fixture
def docker(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECFLEET_DOCKER_SOCKET", str(tmp_path / "docker.sock"))
    servers: list[DockerStandin] = []

    def start(images, containers=()):
        servers.append(DockerStandin(str(tmp_path / "docker.sock"), images, containers=list(containers)))
        return servers[-1]
    yield start
    for s in servers:
        s.stop()


def _images():
    """A Spark after a few lock bumps: the current release's image (a running container), the previous one's, two
    old ones (one pulled from the fleet's registry, one from upstream), one that also carries an operator's tag, the
    operator's own image, and an old one a stopped container still uses."""
    return [
        Image(_id("1"), tags=[_tag("a")], digests=[f"{MIRROR}@{_digest('5')}"], size=21_300_000_000),
        Image(_id("2"), tags=[_tag("b")], digests=[f"{NAME}@{_digest('b')}"]),
        Image(_id("3"), tags=[_tag("c")], digests=[f"{MIRROR}@{_digest('6')}"], size=20_000_000_000),
        Image(_id("4"), tags=[_tag("d")], digests=[f"{NAME}@{_digest('d')}"], size=19_000_000_000),
        Image(_id("5"), tags=[_tag("e"), f"{NAME}:1.2.0rc6"], digests=[f"{NAME}@{_digest('e')}"]),
        Image(_id("6"), tags=["ubuntu:24.04"], digests=["ubuntu@" + _digest("7")]),
        Image(_id("7"), tags=[_tag("f")], digests=[f"{NAME}@{_digest('f')}"]),
    ]


def test_the_images_no_kept_release_runs_are_removed_and_said(docker):
    standin = docker(_images(), containers=[{"Id": "c1", "ImageID": _id("1"), "State": "running"},
                                            {"Id": "c2", "ImageID": _id("7"), "State": "exited"}])
    said: list[str] = []
    removed = docker_images.remove_unused({_tag("a"), _tag("b")}, said.append)
    assert removed == [_tag("c"), _tag("d")]
    assert set(standin.images) == {_id("1"), _id("2"), _id("5"), _id("6"), _id("7")}  # nothing else was touched
    assert standin.images[_id("5")].tags == [_tag("e"), f"{NAME}:1.2.0rc6"]
    assert said == [f"removed image {_tag('c')} ({_id('3')[:19]}, 20.00 GB): no kept release runs it",
                    f"removed image {_tag('d')} ({_id('4')[:19]}, 19.00 GB): no kept release runs it"]
    assert not [c for c in standin.calls if c[0] == "DELETE" and c[1] in (_tag("a"), _tag("b"), _tag("f"))]


def test_an_image_a_kept_release_recorded_by_id_stays_though_its_tag_moved(docker):
    standin = docker([Image(_id("3"), tags=[_tag("c")], digests=[f"{MIRROR}@{_digest('6')}"])])
    assert docker_images.remove_unused({_id("3")}, print) == [] and _id("3") in standin.images


def test_a_removal_docker_refuses_is_said_and_the_image_stays(docker, monkeypatch):
    """A container started between the list and the delete: docker refuses its image's last reference (moby's rule),
    and the prune says so."""
    standin = docker([Image(_id("3"), tags=[_tag("c")])],
                     containers=[{"Id": "late", "ImageID": _id("3"), "State": "running"}])
    monkeypatch.setattr(docker_images, "removable", lambda images, used, kept: images)  # the list saw no container
    said: list[str] = []
    assert docker_images.remove_unused(set(), said.append) == []
    assert standin.images[_id("3")].tags == [_tag("c")]
    assert len(said) == 1 and said[0].startswith(f"kept image {_tag('c')} (0.00 GB): docker refused to remove it "
                                                 "(HTTP 409: conflict: unable to remove repository reference"), said


def _release(data, rid, created, image):
    rdir = data / "releases" / rid
    rdir.mkdir(parents=True)
    (rdir / "release.json").write_text(json.dumps({"id": rid, "created": created, "models": {}, "service": "x",
                                                   "image": image}))


def test_the_prune_after_a_switch_keeps_the_kept_releases_images_for_a_rollback(docker, tmp_path, capsys):
    """keep_releases 3: the current release, the previous (a rollback's target) and the newest other one keep their
    images; the two older releases go, and so do their images, which no kept release runs."""
    standin = docker(_images(), containers=[{"Id": "c1", "ImageID": _id("1"), "State": "running"}])
    for i, (c, rid) in enumerate([("d", "r-000000000001"), ("c", "r-000000000002"), ("f", "r-000000000003"),
                                  ("b", "r-000000000004"), ("a", "r-000000000005")]):
        _release(tmp_path, rid, f"2026-01-0{i + 1}T00:00:00Z", _tag(c))
    os.symlink("releases/r-000000000005", tmp_path / "current")
    (tmp_path / "previous").write_text("r-000000000004\n")
    Host(str(tmp_path)).prune(keep=3)
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["r-000000000003", "r-000000000004",
                                                                          "r-000000000005"]
    assert {standin.resolve(_tag(c)) is not None for c in "abf"} == {True}  # the kept releases still find theirs
    assert standin.resolve(_tag("c")) is None and standin.resolve(_tag("d")) is None
    assert standin.resolve(f"{MIRROR}@{_digest('6')}") is None  # its digest reference went with it: the bytes are gone
    out = capsys.readouterr().out
    assert f"removed image {_tag('c')}" in out and f"removed image {_tag('d')}" in out


def test_a_prune_without_docker_says_so_and_prunes_the_rest(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECFLEET_DOCKER_SOCKET", str(tmp_path / "no-docker.sock"))
    _release(tmp_path, "r-000000000001", "2026-01-01T00:00:00Z", _tag("a"))
    _release(tmp_path, "r-000000000002", "2026-01-02T00:00:00Z", _tag("b"))
    os.symlink("releases/r-000000000002", tmp_path / "current")
    Host(str(tmp_path)).prune(keep=1)
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["r-000000000002"]
    assert "warning: unused images not removed (docker: " in capsys.readouterr().err


def test_the_local_tag_form_is_the_one_the_plan_makes():
    assert docker_images.is_local_tag(_tag("a")) and not docker_images.is_local_tag(f"{NAME}:1.3.0rc12")
    assert not docker_images.is_local_tag(f"{NAME}@{_digest('a')}")
