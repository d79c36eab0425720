"""specfleet-host's release bookkeeping on a scratch data dir (no systemd involved)."""

import json
import os

from specfleet.host.specfleet_host import Host


def _snapshot(hub, repo, commit, files):
    repo_dir = hub / f"models--{repo.replace('/', '--')}"
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snap = repo_dir / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    for name in files:
        blob = repo_dir / "blobs" / f"{commit}-{name}"
        blob.write_text(name)
        os.symlink(os.path.relpath(blob, snap), snap / name)


def _release(data, rid, created, target_commit, draft_commit=None):
    rdir = data / "releases" / rid
    rdir.mkdir(parents=True)
    models = {"target": {"repo": "org/target", "commit": target_commit}}
    if draft_commit:
        models["draft"] = {"repo": "org/draft", "commit": draft_commit}
        ddir = data / "drafts" / "org--draft" / draft_commit
        ddir.mkdir(parents=True, exist_ok=True)
        os.symlink(ddir, rdir / "draft")
    (rdir / "release.json").write_text(json.dumps({"id": rid, "created": created, "models": models, "service": "x"}))


def test_prune_keeps_newest_current_previous_and_their_models(tmp_path):
    hub = tmp_path / "hf" / "hub"
    for i in range(6):
        _snapshot(hub, "org/target", f"t{i}", ["a.safetensors", "config.json"])
        _snapshot(hub, "org/draft", f"d{i}", ["model.safetensors"])
        _release(tmp_path, f"r-{i:012d}", f"2026-01-0{i + 1}T00:00:00Z", f"t{i}", f"d{i}")
    _snapshot(hub, "org/unused", "u0", ["x"])
    os.symlink("releases/r-000000000000", tmp_path / "current")  # oldest is current (after a rollback)
    (tmp_path / "previous").write_text("r-000000000001\n")
    (hub / "models--org--target" / "blobs" / "orphan.incomplete").write_text("partial")

    Host(str(tmp_path)).prune(keep=3)

    kept = sorted(p.name for p in (tmp_path / "releases").iterdir())
    assert kept == ["r-000000000000", "r-000000000001", "r-000000000005"]  # current, previous, newest
    snaps = sorted(p.name for p in (hub / "models--org--target" / "snapshots").iterdir())
    assert snaps == ["t0", "t1", "t5"]
    blobs = sorted(p.name for p in (hub / "models--org--target" / "blobs").iterdir())
    assert blobs == sorted([f"t{i}-{n}" for i in (0, 1, 5) for n in ("a.safetensors", "config.json")] + ["orphan.incomplete"])
    assert sorted(p.name for p in (tmp_path / "drafts" / "org--draft").iterdir()) == ["d0", "d1", "d5"]
    assert not (hub / "models--org--unused").exists()
    # a kept release's files still resolve: switching to it needs no download
    assert (hub / "models--org--target" / "snapshots" / "t1" / "a.safetensors").read_text() == "a.safetensors"


def test_status_lists_releases_newest_first(tmp_path):
    _release(tmp_path, "r-000000000001", "2026-01-01T00:00:00Z", "t1")
    _release(tmp_path, "r-000000000002", "2026-01-02T00:00:00Z", "t2")
    os.symlink("releases/r-000000000001", tmp_path / "current")
    (tmp_path / "previous").write_text("r-000000000002\n")
    host = Host(str(tmp_path))
    assert host.current() == "r-000000000001" and host.previous() == "r-000000000002"
    assert [r["id"] for r in host.all_records()] == ["r-000000000002", "r-000000000001"]
