
import sys

import pytest

from tests.unit.installed import folders

# Host programs import their siblings by bare name (on a host they are installed side by side in one directory); the
# tests that import them in-process find those siblings in each feature's host folder.
sys.path[1:1] = [folder for folder in folders() if folder not in sys.path]

TOKEN = "hf_unit_test_secret_Zq9"
# A vendored fleet project (tests/unit/test_old_scaffold.py): its tests/infra suite runs against hosts, not here.
collect_ignore = ["scaffold_v010"]


@pytest.fixture(autouse=True)
def _token(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.delenv("SPECFLEET_INVENTORY", raising=False)
    # a host program run in-process (the host tool's prune) never reaches this machine's docker: a test that means
    # docker points this at its stand-in (tests/unit/docker_standin.py)
    monkeypatch.setenv("SPECFLEET_DOCKER_SOCKET", str(tmp_path_factory.getbasetemp() / "no-docker.sock"))
    yield


@pytest.fixture
def fleet_file(tmp_path, monkeypatch):
    """Write an inventory YAML and point SPECFLEET_INVENTORY at it; with `lock`, also the lock file that
    `specfleet lock` would write next to it (fake pins, no Hub)."""
    def write(text: str, lock: bool = True):
        from tests.unit.fakehost import write_fake_lock

        path = tmp_path / "fleet.yml"
        path.write_text(text)
        monkeypatch.setenv("SPECFLEET_INVENTORY", str(path))
        if lock:
            write_fake_lock(path)
        return path
    return write
