"""The package works without the source tree: build the wheel, install it into a fresh venv, `specfleet
init` a project and `specfleet check` it from there.

`pip wheel --no-deps` builds in pip's isolated build env (setuptools>=68 from pip's configured index or
find-links; ~13 s here). The venv uses --system-site-packages and the wheel is installed with its `infra` extra
(what a fleet project's `pytest tests/infra` needs) and --no-index: every requirement must be met by what is
already installed for this test run (constraints.txt's pins), so nothing is downloaded, and a range that leaves
out the version CI runs fails the install. The venv's own site-packages comes first, so `specfleet` there is the
wheel's (asserted), not this checkout's editable install.

The VM lab (`lab/`, the `specfleet-lab` distribution) is copied into the build's source too, so that a
packages.find that would pick it up fails `test_the_runtime_wheel_holds_no_lab`."""

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.unit.fakehost import write_fake_lock

ROOT = Path(__file__).resolve().parents[2]


LAB = ROOT / "lab" / "specfleet_lab"


def _run_checked(*cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The runtime wheel, built from a clean copy of the source tree (the lab included, as in a checkout)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a clean copy: an in-tree build/ could carry stale files into the wheel
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "specfleet", src / "specfleet", ignore=ignore)
    shutil.copytree(ROOT / "lab", src / "lab", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _run_checked(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src))
    return next((tmp / "dist").glob("specfleet-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("venv")
    _run_checked(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(tmp / "venv"))
    _run_checked(sys.executable, "-m", "pip", "--python", str(tmp / "venv/bin/python"), "install", "--no-index", "-q",
                 f"{wheel}[infra]")
    return tmp / "venv"


def test_the_runtime_wheel_holds_no_lab(wheel):
    """The VM lab is a distribution of its own: no file of it (by path or by content) and no `specfleet-lab`
    command in the runtime wheel."""
    lab_files = {hashlib.sha256(p.read_bytes()).digest(): p.relative_to(LAB.parent).as_posix()
                 for p in sorted(LAB.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
    assert len(lab_files) >= 10, sorted(lab_files.values())  # the lab is there to compare against
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        leaked = [n for n in names if "specfleet_lab" in n or n.startswith("lab/") or n == "specfleet/vm.py"]
        leaked += [f"{n} (the lab's {lab_files[h]})" for n in names
                   if n not in leaked and (h := hashlib.sha256(z.read(n)).digest()) in lab_files]
        entry_points = next((z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt")), "")
    assert any(n.startswith("specfleet/") for n in names), names  # a real wheel of the runtime package
    assert not leaked, f"the runtime wheel holds the VM lab: {leaked}"
    assert "specfleet-lab" not in entry_points and "specfleet_lab" not in entry_points, entry_points


def test_the_wheel_offers_the_infra_extra_a_project_s_tests_run_with(wheel):
    """`pip install 'specfleet[infra]'` brings what `pytest tests/infra` needs: the wheel's metadata names the extra
    and requires pytest and pytest-testinfra under it, in the ranges pyproject.toml gives."""
    import email
    import tomllib

    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = email.message_from_bytes(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))))
    assert "infra" in meta.get_all("Provides-Extra", []), meta.get_all("Provides-Extra")
    under_infra = {r.name: r.specifier for r in map(Requirement, meta.get_all("Requires-Dist", []))
                   if r.marker is not None and r.marker.evaluate({"extra": "infra"})
                   and not r.marker.evaluate({"extra": ""})}
    assert set(under_infra) == {"pytest", "pytest-testinfra"}, under_infra
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["infra"]
    assert under_infra == {r.name: r.specifier for r in map(Requirement, declared)}


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPECFLEET_INVENTORY", "PYTHONPATH")}
    env.update(HF_TOKEN="hf_dummy_for_the_wheel_test", PATH=f"{venv}/bin:{env.get('PATH', '')}")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_installed_wheel_inits_and_checks_a_project(wheel, venv, tmp_path):
    where = _run(venv, tmp_path, f"{venv}/bin/python", "-c", "import specfleet; print(specfleet.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    version = _run(venv, tmp_path, f"{venv}/bin/specfleet", "--version")
    assert version.returncode == 0 and version.stdout == f"specfleet {wheel.name.split('-')[1]}\n", version

    init = _run(venv, tmp_path, f"{venv}/bin/specfleet", "init", "fleet")
    assert init.returncode == 0, init.stderr
    proj = tmp_path / "fleet"
    for rel in ("inventory.py", "inventory/fleet.yml", "group_data/all.py", "tests/infra/conftest.py",
                "deploys/eagle3.py", "deploys/draft_target.py", "deploys/baseline.py", "deploys/cleanup.py",
                "deploys/rollback.py", "README.md"):
        assert (proj / rel).is_file(), rel
    again = _run(venv, tmp_path, f"{venv}/bin/specfleet", "init", "fleet")
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1

    write_fake_lock(proj / "inventory/fleet.yml")  # what `specfleet lock` writes (fake pins: no Hub here)
    check = _run(venv, proj, f"{venv}/bin/specfleet", "check", "inventory.py", "deploys/eagle3.py")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "2 host(s) valid for deploys/eagle3.py [eagle3]: spark-01, spark-02" in check.stdout

    (proj / "inventory/fleet.yml").write_text((proj / "inventory/fleet.yml").read_text()
                                              .replace("ssh_hostname: spark-02.lab.example", "ssh_hostname: spark-02.lab.example\n          serve_port: 0"))
    bad = _run(venv, proj, f"{venv}/bin/specfleet", "check", "inventory.py", "deploys/eagle3.py")
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert bad.stderr.strip().splitlines() == ["spark-02: serve_port: input should be greater than or equal to 1"]

    # the testinfra entry point collects the packaged suite (the example hosts are not reachable: collect only)
    infra = _run(venv, proj, f"{venv}/bin/python", "-m", "pytest", "tests/infra", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert infra.returncode == 0, infra.stdout + infra.stderr
    assert "test_converged.py::test_completion_returns_text[spark-01]" in infra.stdout
    assert "test_real_gpu.py::test_nvidia_smi_in_the_container[spark-02]" in infra.stdout


def test_the_runtime_wheel_holds_every_file_the_code_reads_from_the_package(wheel):
    """Package data read with importlib.resources ships in the wheel (templates, probes, the gateway's Lua, the
    packaged profiles)."""
    root = Path(__file__).resolve().parents[2] / "specfleet"
    wanted = {p.relative_to(root.parent).as_posix() for pattern in ("*/templates/*.j2", "host/probes/*.sh", "*/host/*.sh", "*/host/*.lua",
                                                                   "*/dashboards/*.json", "profiles/*.yml")
              for p in root.glob(pattern)}
    assert {"specfleet/gateway/host/gateway_models.lua", "specfleet/serving/templates/serving.service.j2",
            "specfleet/gateway/dashboards/specfleet-fleet.json", "specfleet/profiles/eagle3.yml",
            "specfleet/profiles/index.yml"} <= wanted
    with zipfile.ZipFile(wheel) as z:
        missing = sorted(wanted - set(z.namelist()))
    assert not missing, missing
