"""The image registry on the mirror host (image_mirror): its vars and the rules between hosts, the files it renders
(the distribution's registry config, read-only for the fleet; its units), the NGC login, and the mirror deploy on
pyinfra's @fake connector: a fresh registry, a converged one, one turned off, and the package's own registry running.
With the distribution's registry installed (CI installs it), its real binary serves the rendered configs."""

import base64
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from specfleet.fleet.status import sha256
from specfleet.host.layout import REGISTRY_BIN, MirrorLayout
from specfleet.mirror.render import ngc_auth_text, registry_files
from specfleet.mirror.rules import budget_problem
from specfleet.mirror.steps.hub import host_files
from specfleet.plan import PlanError, build_plans, load_inventory_or_fail
from specfleet.steps import cleanup, mirror_setup
from tests.unit.fakehost import changed_ops, executed, fake_run_on, run_deploy
from tests.unit.test_mirror import MIRROR_FACT, _mirror_lines

FLEET = """
all:
  vars: {{hub_endpoint: "http://hub.lab:8999", hf_token_required: false, image_mirror: true{all}}}
  children:
    hub_mirror:
      hosts:
        mirror-01: {{ansible_host: 10.1.0.5{mirror}}}
    sparks:
      hosts:
        spark-01: {{ansible_host: 10.1.0.11{spark}}}
        spark-02: {{ansible_host: 10.1.0.12}}
"""
STORE = "/var/lib/specfleet-mirror/images"


def _plans(fleet_file, all="", mirror="", spark="", text=None, profile=None):
    fleet_file(text or FLEET.format(all=all, mirror=mirror, spark=spark))
    return build_plans(load_inventory_or_fail(), profile, resolve=profile is not None, deploying=True)


def _problems(fleet_file, **kw):
    with pytest.raises(PlanError) as exc:
        _plans(fleet_file, **kw)
    return exc.value.lines


# ---- vars and the rules between hosts ---------------------------------------------------------------------------
@pytest.mark.parametrize("kw, expect", [
    ({"mirror": ", image_registry_port: 70000"}, "mirror-01: image_registry_port: input should be less than or equal"
                                                 " to 65535"),
    ({"mirror": ", image_registry_port: 8090"}, "mirror-01: image_registry_port: 8090 is also mirror_port on this "
                                                "host (allowed: a port of its own)"),
    ({"mirror": ", image_registry_engine_port: 18090"}, "mirror-01: image_registry_engine_port: 18090 is also "
                                                        "mirror_engine_port on this host (allowed: a port of its own)"),
    ({"mirror": ", image_store_dir: relative/images"}, "mirror-01: image_store_dir: "),
    ({"mirror": ", image_store_budget_gb: -1"}, "mirror-01: image_store_budget_gb: input should be greater than or "
                                                "equal to 0"),
    ({"mirror": ", ngc_registry: 'nvcr.io/x y'"}, "mirror-01: ngc_registry: 'nvcr.io/x y' is not a registry"),
    ({"mirror": ", image_mirror: false"}, "sparks (spark-01, spark-02): image_mirror: true, but mirror-01 (the hub_mirror host) runs no "
                                          "image registry: its image_mirror is false"),
    ({"spark": ", fleet_address: spark-01.lab"}, "spark-01: fleet_address: 'spark-01.lab' is not an IPv4 address "
                                                 "(with image_mirror the registry binds the mirror's fleet address"),
])
def test_bad_registry_vars_are_one_line(fleet_file, kw, expect):
    lines = _problems(fleet_file, **kw)
    assert any(line.startswith(expect) for line in lines), lines


def test_image_mirror_without_a_mirror_group_is_refused(fleet_file):
    text = "all:\n  vars: {hf_token_required: false, image_mirror: true}\n  hosts:\n    spark-01: {ansible_host: 10.1.0.11}\n"
    assert _problems(fleet_file, text=text) == [
        "spark-01: image_mirror: true, but the fleet has no hub_mirror group (allowed: false, or a hub_mirror group "
        "whose host runs the registry)"]


@pytest.mark.parametrize("content, expect", [
    (None, "mirror-01: ngc_api_key_file: cannot read {path}: No such file or directory"),
    ("  \n", "mirror-01: ngc_api_key_file: {path} is empty"),
])
def test_an_unreadable_ngc_key_file_is_one_line(fleet_file, tmp_path, content, expect):
    path = tmp_path / "ngc.key"
    if content is not None:
        path.write_text(content)
    assert _problems(fleet_file, mirror=f", ngc_api_key_file: {path}") == [expect.format(path=path)]


def test_the_fleet_gives_the_registry_its_address_and_its_clients(fleet_file):
    plans = _plans(fleet_file)
    m, s1 = plans["mirror-01"].settings, plans["spark-01"].settings
    assert m.image_registry == "10.1.0.5:5000" and m.image_clients == ["10.1.0.11", "10.1.0.12"]
    assert s1.image_registry == "10.1.0.5:5000" and s1.image_clients == []
    # a Spark that does not pull through the mirror is not admitted
    plans = _plans(fleet_file, spark=", image_mirror: false")
    assert plans["mirror-01"].settings.image_clients == ["10.1.0.12"]
    assert plans["spark-01"].settings.image_registry is None


def test_no_image_mirror_renders_nothing(fleet_file):
    plans = _plans(fleet_file, all=", image_mirror: false")
    assert registry_files(plans["mirror-01"].settings) == {} and plans["spark-01"].settings.image_registry is None


# ---- rendered files ---------------------------------------------------------------------------------------------
def test_rendered_registry_files(fleet_file):
    s = _plans(fleet_file)["mirror-01"].settings
    p = MirrorLayout(s.mirror_cache_dir)
    files = registry_files(s)
    assert sorted(files) == sorted([p.reader_config, p.writer_config, *p.registry_units])
    socket_unit = files[p.registry_socket]
    assert "ListenStream=10.1.0.5:5000\n" in socket_unit and "IPAddressDeny=any\n" in socket_unit
    assert "IPAddressAllow=10.1.0.11 10.1.0.12\n" in socket_unit and "FreeBind=yes" in socket_unit
    service = files[p.registry_service]
    assert f"ExecStart=/usr/bin/docker-registry serve {p.reader_config}\n" in service
    assert f"ReadOnlyPaths={STORE}\n" in service and "User=docker-registry" in service
    assert "127.0.0.1:15000" in files[p.registry_proxy]
    reader, writer = files[p.reader_config], files[p.writer_config]
    assert 'addr: "127.0.0.1:15000"' in reader and f'rootdirectory: "{STORE}"' in reader
    assert "readonly:\n      enabled: true" in reader and "readonly:\n      enabled: false" in writer
    assert "delete:\n    enabled: false" in reader and "delete:\n    enabled: true" in writer


def test_a_registry_without_clients_admits_nobody(fleet_file):
    s = _plans(fleet_file, all=", image_mirror: false", mirror=", image_mirror: true")["mirror-01"].settings
    assert "IPAddressAllow=\n" in registry_files(s)[MirrorLayout(s.mirror_cache_dir).registry_socket]


def test_the_ngc_login_names_only_its_registry_and_is_redacted_for_display(fleet_file, tmp_path):
    (tmp_path / "ngc.key").write_text("nvapi-SECRET\n")
    s = _plans(fleet_file, mirror=f", ngc_api_key_file: {tmp_path / 'ngc.key'}")["mirror-01"].settings
    auths = json.loads(ngc_auth_text(s, redact=False))["auths"]
    assert list(auths) == ["nvcr.io"]
    assert base64.b64decode(auths["nvcr.io"]["auth"]).decode() == "$oauthtoken:nvapi-SECRET"
    assert "SECRET" not in ngc_auth_text(s) and "SECRET" not in repr(s)


def test_budget_against_the_locked_sizes():
    table = {"linux/arm64": {"digest": "sha256:" + "a" * 64, "bytes": 21_300_000_000},
             "linux/amd64": {"digest": "sha256:" + "b" * 64, "bytes": 19_000_000_000}}
    assert budget_problem("mirror-01", 22, {"nvcr.io/x:1": table}, "fleet.yml.lock") is None
    line = budget_problem("mirror-01", 20, {"nvcr.io/x:1": table}, "fleet.yml.lock")
    assert line == ("mirror-01: image_store_budget_gb: 20 GB is below the 21.30 GB of the images the Sparks pull "
                    "through the mirror (nvcr.io/x:1 21.30 GB, in fleet.yml.lock) (allowed: at least 22)")
    note = budget_problem("mirror-01", 20, {"nvcr.io/x:1": None}, "fleet.yml.lock")
    assert note.startswith("note: mirror-01: image_store_budget_gb: not checked: fleet.yml.lock records no size")


# ---- the mirror deploy ------------------------------------------------------------------------------------------
def _lines(plan, registry: str = "none", **kw) -> list[str]:
    """The mirror's status lines: olah converged, and the registry absent ('none'), 'converged', or 'package-running'
    (the package installed with its own unit running)."""
    lines = _mirror_lines(plan, converged=True, **kw)
    s, p = plan.settings, MirrorLayout(plan.settings.mirror_cache_dir)
    if registry == "none":
        return lines + ["registry_pkgs\t\t", "registry_active\tinactive\tinactive", "registry_package_unit\t\tinactive"]
    if registry == "package-running":
        return lines + ["registry_pkgs\t2.8.2+ds1-1\t1.9.3", "registry_package_unit\tenabled\tactive"]
    lines += ["registry_pkgs\t2.8.2+ds1-1\t1.9.3+ds1-1", "registry_user\t997", "registry_active\tactive\tactive",
              "registry_enabled\tenabled\tenabled", "registry_package_unit\tmasked\tinactive", "store\t4096"]
    lines += [f"sha\t{sha256(c)}\t{path}" for path, c in registry_files(s).items()]
    lines += [f"dir\t755|root|root\t{p.registry_dir}", f"dir\t750|docker-registry|docker-registry\t{STORE}"]
    text = ngc_auth_text(s, redact=False)
    return lines + ([f"sha\t{sha256(text)}\t{plan.paths.ngc_auth_file}"] if text else [])


def _deploy(plans, registry, fn=mirror_setup):
    state = run_deploy({"mirror-01": plans["mirror-01"]}, fn, responses=lambda p: {MIRROR_FACT: _lines(p, registry)})
    return state, executed(state)["mirror-01"]


def test_a_fresh_registry_masks_the_package_unit_before_installing(fleet_file):
    state, cmds = _deploy(_plans(fleet_file), "none")
    text = "\n".join(cmds)
    assert not state.failed_hosts
    mask = text.index("systemctl mask docker-registry.service")
    install = text.index("install -o DPkg::Lock::Timeout=600 docker-registry skopeo")
    assert mask < install
    for needle in (f"install -d -m 750 -o docker-registry -g docker-registry {STORE}",
                   "/etc/systemd/system/specfleet-image-registry-proxy.socket",
                   "systemctl enable specfleet-image-registry.service specfleet-image-registry-proxy.socket",
                   "systemctl restart specfleet-image-registry.service", "http://127.0.0.1:15000/v2/"):
        assert needle in text, needle
    assert text.index("systemctl restart specfleet-image-registry.service") < text.index("http://127.0.0.1:15000/v2/")


def test_a_converged_registry_is_only_read(fleet_file):
    state, cmds = _deploy(_plans(fleet_file), "converged")
    assert not state.failed_hosts and changed_ops(state)["mirror-01"] == [] and len(cmds) == 1


def test_the_ngc_key_travels_on_stdin_only(fleet_file, tmp_path):
    (tmp_path / "ngc.key").write_text("nvapi-SECRET\n")
    state, cmds = _deploy(_plans(fleet_file, mirror=f", ngc_api_key_file: {tmp_path / 'ngc.key'}"), "none")
    assert not state.failed_hosts
    assert any("/etc/specfleet/ngc-auth.json.specfleet-tmp" in c and "umask 077" in c and "chmod 600" in c
               for c in cmds)
    assert not [c for c in cmds if "SECRET" in c or base64.b64encode(b"$oauthtoken:nvapi-SECRET").decode() in c]


def test_the_package_s_own_registry_running_is_refused_before_anything_changes(fleet_file):
    state, cmds = _deploy(_plans(fleet_file), "package-running")
    text = "\n".join(cmds)
    assert "docker-registry.service (the registry of the docker-registry package, on every interface) is running" \
        in text
    assert "apt-get" not in text and "Write " not in text and "systemctl enable" not in text


def test_image_mirror_off_removes_the_registry_but_keeps_the_store(fleet_file):
    converged = _lines(_plans(fleet_file)["mirror-01"], "converged")
    plans = _plans(fleet_file, all=", image_mirror: false")
    state = run_deploy({"mirror-01": plans["mirror-01"]}, mirror_setup, responses=lambda p: {MIRROR_FACT: converged})
    text = "\n".join(executed(state)["mirror-01"])
    assert "systemctl disable --now specfleet-image-registry-proxy.socket" in text
    assert "rm -f /var/lib/specfleet-mirror/registry/reader.yml" in text and "rm -rf" not in text


def test_cleanup_purges_the_store_only_with_purge_models(fleet_file):
    for purge, expect in ((False, False), (True, True)):
        plans = _plans(fleet_file, mirror=f", purge_models: {str(purge).lower()}")
        state, cmds = _deploy(plans, "converged", fn=cleanup)
        assert (f"rm -rf {STORE}" in "\n".join(cmds)) is expect
        assert any("systemctl disable --now specfleet-image-registry" in c for c in cmds)


def test_host_files_are_unchanged_by_the_registry(fleet_file):
    """The registry adds no host program: the mirror's installed tools are the Hub mirror's."""
    plans = _plans(fleet_file)
    assert host_files(plans["mirror-01"]) == host_files(_plans(fleet_file, all=", image_mirror: false")["mirror-01"])


# ---- the distribution's registry serving the rendered configs ---------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answer(url: str, method: str = "GET") -> int:
    for _ in range(100):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url}: no answer")


@pytest.mark.skipif(not os.path.exists(REGISTRY_BIN), reason="the distribution's docker-registry is not installed")
def test_the_real_registry_serves_the_reader_read_only_and_the_writer_read_write(fleet_file, tmp_path):
    reader_port, writer_port = _free_port(), _free_port()
    plans = _plans(fleet_file, mirror=f", image_store_dir: {tmp_path / 'store'}, "
                                      f"image_registry_engine_port: {reader_port}")
    s = plans["mirror-01"].settings
    p = MirrorLayout(s.mirror_cache_dir)
    files = registry_files(s)
    (tmp_path / "store").mkdir()
    procs = []
    try:
        for name, env in ((p.reader_config, {}), (p.writer_config, {"REGISTRY_HTTP_ADDR": f"127.0.0.1:{writer_port}"})):
            config = tmp_path / os.path.basename(name)
            config.write_text(files[name])
            procs.append(subprocess.Popen([REGISTRY_BIN, "serve", str(config)], env={**os.environ, **env},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        reader, writer = f"http://127.0.0.1:{reader_port}", f"http://127.0.0.1:{writer_port}"
        assert _answer(f"{reader}/v2/") == 200 and _answer(f"{writer}/v2/") == 200
        assert _answer(f"{reader}/v2/x/blobs/uploads/", "POST") == 405  # the fleet's registry cannot be written
        assert _answer(f"{writer}/v2/x/blobs/uploads/", "POST") == 202  # the fetch job's can
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


# ---- `specfleet plan inventory.py deploys/hub_mirror.py` --------------------------------------------------------
def test_plan_of_the_mirror_deploy_lists_the_registry_steps(fleet_file, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    plans = _plans(fleet_file)
    state_of = {"registry": "none"}
    fake_run_on(monkeypatch, lambda p: {MIRROR_FACT: _lines(p, state_of["registry"])})
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/hub_mirror.py"])
    assert result.exit_code == 10, result.output
    assert "mirror-01: hub_mirror: 7 change(s)" in result.output, result.output
    assert "  install docker-registry and skopeo from the distribution (docker-registry.service masked first)" \
        in result.output
    assert "  start the image registry on 10.1.0.5:5000 (read-only, for 2 Spark(s))" in result.output
    state_of["registry"] = "converged"
    result = CliRunner().invoke(main, ["plan", "inventory.py", "deploys/hub_mirror.py"])
    assert result.exit_code == 0 and "mirror-01: hub_mirror: nothing to do" in result.output, result.output
    assert plans["mirror-01"].is_mirror


# ---- the store's budget against the lock's image sizes (`specfleet check`) -------------------------------------
def _pin_images(fleet_path, platforms):
    from specfleet.pins.lockfile import lock_path, read_lock, write_lock

    lock = read_lock(lock_path(fleet_path))
    for ref in lock.images:
        lock.images[ref] = {"image_digest": "sha256:" + "d" * 64, **({"platforms": platforms} if platforms else {})}
    write_lock(lock_path(fleet_path), lock, fleet_path.name)


@pytest.mark.parametrize("budget, sizes, code, expect", [
    (20, True, 2, "mirror-01: image_store_budget_gb: 20 GB is below the 21.30 GB of the images the Sparks pull "
                  "through the mirror (nvcr.io/nvidia/tensorrt-llm/release@sha256:dddddddddddd"),
    (22, True, 0, None),
    (20, False, 0, "  note: mirror-01: image_store_budget_gb: not checked: fleet.yml.lock records no size for "
                   "nvcr.io/nvidia/tensorrt-llm/release@sha256:dddd"),
])
def test_check_holds_the_store_budget_against_the_locked_sizes(fleet_file, monkeypatch, tmp_path, budget, sizes,
                                                                code, expect):
    from click.testing import CliRunner

    from specfleet.cli import main

    monkeypatch.chdir(tmp_path)
    path = fleet_file(FLEET.format(all="", mirror=f", image_store_budget_gb: {budget}", spark=""))
    _pin_images(path, {"linux/arm64": {"digest": "sha256:" + "a" * 64, "bytes": 21_300_000_000},
                       "linux/amd64": {"digest": "sha256:" + "b" * 64, "bytes": 300_000_000}} if sizes else None)
    (tmp_path / "inventory.py").write_text("")
    (tmp_path / "eagle3.py").write_text('PROFILE = "eagle3"\n')
    result = CliRunner().invoke(main, ["check", "inventory.py", "eagle3.py"])
    assert result.exit_code == code, result.output
    if expect:
        assert any(line.startswith(expect) for line in result.output.splitlines()), result.output
    else:
        assert "image_store_budget_gb" not in result.output, result.output


def test_mirror_status_lists_the_stored_images_and_which_the_lock_pins(fleet_file, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    from specfleet.pins.lockfile import lock_path, read_lock, write_lock

    path = fleet_file(FLEET.format(all="", mirror="", spark=""))
    lock = read_lock(lock_path(path))
    pinned, other = "sha256:" + "a" * 64, "sha256:" + "f" * 64
    for ref in lock.images:
        lock.images[ref] = {"image_digest": "sha256:" + "d" * 64,
                            "platforms": {"linux/arm64": {"digest": pinned, "bytes": 21_300_000_000}}}
    write_lock(lock_path(path), lock, path.name)
    stored = [f"stored\tnvcr.io/nvidia/tensorrt-llm/release\t{d.replace(':', '-')}\t{d}" for d in (pinned, other)]
    fake_run_on(monkeypatch, lambda p: {MIRROR_FACT: _lines(p, "converged") + stored})
    result = CliRunner().invoke(main, ["mirror", "status", "inventory.py"])
    assert result.exit_code == 0, result.output
    assert ("mirror-01: image registry 10.1.0.5:5000: service active, socket active; store "
            "/var/lib/specfleet-mirror/images: 0.00 GB of 100 GB (image_store_budget_gb), 2 image(s)") in result.output
    assert f"  nvcr.io/nvidia/tensorrt-llm/release@{pinned[:19]}  (pinned by the lock)" in result.output
    assert f"  nvcr.io/nvidia/tensorrt-llm/release@{other[:19]}  (not pinned)" in result.output
