"""The lock file (`specfleet lock`, `<fleet>.lock`): written from the Hub stand-in, read by every plan without
contacting anything, refusals naming the command that fixes them, `--upgrade` printing old -> new; and the
registry digest of an image (against a tiny in-process registry with the anonymous bearer-token flow)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.fleet.inventory import load_inventory
from specfleet.pins.images import NotPinned, parse_reference, resolve_digest
from specfleet.pins.lockfile import lock_path, read_lock
from specfleet.plan import PlanError, build_plans
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin

EAGLE = "nvidia/gpt-oss-120b-Eagle3-long-context"
DIGEST = "sha256:" + "4f" * 32


# ---- a fake registry: /v2 manifests behind an anonymous bearer token -------------------------------------------
class FakeRegistry:
    def __init__(self, tags: dict[str, str]):
        self.tags = tags  # "name:tag" -> digest
        self.seen: list[tuple[str, str, str]] = []  # (method, path, Accept)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _answer(self, body: bool):
                outer.seen.append((self.command, self.path, self.headers.get("Accept", "")))
                if self.path.startswith("/token?"):
                    data = json.dumps({"token": "anon-pull-token"}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                name, _, tag = self.path.removeprefix("/v2/").partition("/manifests/")
                if self.headers.get("Authorization") != "Bearer anon-pull-token":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", f'Bearer realm="http://{self.headers["Host"]}/token",'
                                                         f'service="fake-registry",scope="repository:{name}:pull"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                digest = outer.tags.get(f"{name}:{tag}")
                self.send_response(200 if digest else 404)
                if digest:
                    self.send_header("Docker-Content-Digest", digest)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_HEAD(self):
                self._answer(False)

            def do_GET(self):
                self._answer(True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def registry():
    reg = FakeRegistry({"nvidia/tensorrt-llm/release:1.2.0rc6": DIGEST})
    yield reg
    reg.close()


@pytest.fixture(scope="module")
def hub():
    with HubStandin() as server:
        yield server


def test_reference_normalisation():
    assert parse_reference("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6") == \
        parse_reference("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6")
    ref = parse_reference("nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6")
    assert (ref.registry, ref.name, ref.tag, ref.api_host, ref.scheme) == \
        ("nvcr.io", "nvidia/tensorrt-llm/release", "1.2.0rc6", "nvcr.io", "https")
    ref = parse_reference("specfleet-standin/trtllm-serve:1.2.0rc6-standin")
    assert (ref.registry, ref.name, ref.api_host) == ("docker.io", "specfleet-standin/trtllm-serve", "registry-1.docker.io")
    assert parse_reference("ubuntu").name == "library/ubuntu" and parse_reference("ubuntu").tag == "latest"
    assert parse_reference("localhost:5000/x/y:1").scheme == "http"
    assert parse_reference(f"nvcr.io/x/y@{DIGEST}").digest == DIGEST


def test_registry_digest_through_the_anonymous_token_flow(registry):
    assert resolve_digest(f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0rc6") == DIGEST
    methods = [(m, p.split("?")[0]) for m, p, _ in registry.seen]
    assert methods[:3] == [("HEAD", "/v2/nvidia/tensorrt-llm/release/manifests/1.2.0rc6"), ("GET", "/token"),
                           ("HEAD", "/v2/nvidia/tensorrt-llm/release/manifests/1.2.0rc6")]
    assert "scope=repository%3Anvidia%2Ftensorrt-llm%2Frelease%3Apull" in registry.seen[1][1]
    assert "application/vnd.oci.image.index.v1+json" in registry.seen[0][2]
    assert "application/vnd.docker.distribution.manifest.list.v2+json" in registry.seen[0][2]
    with pytest.raises(NotPinned, match="HTTP 404"):
        resolve_digest(f"{registry.host}/nvidia/tensorrt-llm/release:9.9")
    with pytest.raises(NotPinned, match="cannot reach"):
        resolve_digest("127.0.0.1:9/nvidia/tensorrt-llm/release:1.2.0rc6", timeout=5)


# ---- `specfleet lock` against the Hub stand-in -----------------------------------------------------------------
def _fleet(fleet_file, hub, image, **host_vars):
    vars_ = {"hub_endpoint": hub.url, "image": image}
    hosts = "\n".join(f"    {h}: {json.dumps(v)}" if v else f"    {h}:" for h, v in ({"s1": {}} | host_vars).items())
    return fleet_file(f"all:\n  vars: {json.dumps(vars_)}\n  hosts:\n{hosts}\n", lock=False)


def _cli(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def standin_token(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", STANDIN_TOKEN)


def test_lock_writes_every_profile_with_files_blobs_and_the_image_digest(fleet_file, hub, registry, standin_token):
    image = f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0rc6"
    path = _fleet(fleet_file, hub, image)
    result = _cli("lock", "inventory.py")
    assert result.exit_code == 0, result.output
    lock_file = lock_path(path)
    text = lock_file.read_text()
    assert text.startswith("# specfleet lock file, GENERATED by `specfleet lock inventory.py`") and "Commit it" in text
    doc = yaml.safe_load(text)
    assert set(doc["models"]) == {"openai/gpt-oss-120b", EAGLE, "nvidia/Llama-3.3-70B-Instruct-FP4",
                                  "nvidia/Llama-3.1-8B-Instruct-FP4"}
    target = doc["models"]["openai/gpt-oss-120b"]["main"]
    assert target["commit"] == HubStandin.commit("openai/gpt-oss-120b")
    names = [f["name"] for f in target["files"]]
    assert "model-00000-of-00002.safetensors" in names and not [n for n in names if n.startswith(("original/", "metal/"))]
    blobs = {f["name"]: f["blob"] for f in target["files"]}
    assert len(blobs["model-00000-of-00002.safetensors"]) == 64 and len(blobs["config.json"]) == 40  # LFS sha256 / git blob
    assert doc["images"] == {image: {"image_digest": DIGEST}}
    assert f"image {image}: pinned to {DIGEST}" in result.output
    # writing it again changes nothing (stable order, pins kept)
    assert _cli("lock", "inventory.py").exit_code == 0 and lock_file.read_text() == text


def test_plans_read_the_lock_and_never_contact_the_hub(fleet_file, hub, registry, standin_token):
    path = _fleet(fleet_file, hub, f"{registry.host}/nvidia/tensorrt-llm/release:1.2.0rc6")
    assert _cli("lock", "inventory.py").exit_code == 0
    hub.reset_log()
    # the Hub and the controller's endpoint now point nowhere: the plan still builds, from the lock alone
    text = path.read_text().replace(hub.url, "http://127.0.0.1:9")
    path.write_text(text)
    plans = build_plans(load_inventory(path), "eagle3")
    pin = plans["s1"].pins["draft"]
    assert pin.commit == HubStandin.commit(EAGLE) and pin.blobs and len(pin.blobs) == len(pin.files)
    assert plans["s1"].image_digest == DIGEST
    assert hub.requests() == []
    result = _cli("check", "inventory.py", "deploys/draft_target.py")
    assert result.exit_code == 0, result.output
    assert hub.requests() == []


def test_missing_lock_is_refused_naming_the_command(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n", lock=False)
    for args in (["check", "inventory.py", "deploys/eagle3.py"], ["render", "inventory.py", "deploys/eagle3.py", "spark-01"]):
        result = _cli(*args)
        assert result.exit_code == 2, result.output
        assert result.output.strip().endswith("fleet.yml.lock: no lock file; model commits and file lists come from it "
                                              "(run: specfleet lock inventory.py, then commit it)")
    # profile-less deploys need no pins
    assert _cli("check", "inventory.py", "deploys/cleanup.py").exit_code == 0


def test_revision_the_lock_lacks_is_refused_before_anything(fleet_file):
    path = fleet_file("all:\n  hosts:\n    spark-01:\n    spark-02:\n")
    path.write_text("all:\n  hosts:\n    spark-01:\n    spark-02: {target_revision: v2}\n")
    result = _cli("check", "inventory.py", "deploys/eagle3.py")
    assert result.exit_code == 2
    assert result.output.splitlines() == [
        f"spark-02: target_revision: openai/gpt-oss-120b at 'v2' is not in {path}.lock (run: specfleet lock inventory.py)"]
    # and through pyinfra's inventory.py: one line, exit 2, before any host is contacted
    from specfleet.plan import pyinfra_groups
    with pytest.raises(SystemExit) as exc:
        pyinfra_groups(["pyinfra", "inventory.py", "deploys/eagle3.py"])
    assert exc.value.code == 2


def test_image_the_lock_lacks_is_refused(fleet_file):
    path = fleet_file("all:\n  hosts:\n    spark-01:\n")
    path.write_text("all:\n  hosts:\n    spark-01: {image: 'nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12'}\n")
    with pytest.raises(PlanError) as exc:
        build_plans(load_inventory(path), "baseline")
    assert exc.value.lines == [f"spark-01: image: nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12 is not in {path}.lock "
                               "(run: specfleet lock inventory.py)"]


def test_malformed_lock_is_one_line(fleet_file):
    path = fleet_file("all:\n  hosts:\n    spark-01:\n")
    lock_path(path).write_text("version: 1\nmodels: {openai/gpt-oss-120b: {main: {commit: nope, files: []}}}\n")
    result = _cli("check", "inventory.py", "deploys/eagle3.py")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "malformed entry" in result.output and "specfleet lock inventory.py" in result.output


def test_lock_keeps_pins_and_upgrade_prints_old_to_new(fleet_file, hub, standin_token):
    old, new = HubStandin.commits(EAGLE)[0], HubStandin.commit(EAGLE)
    path = _fleet(fleet_file, hub, "127.0.0.1:9/not/a-registry:1")
    result = _cli("lock", "inventory.py", "--profile", "eagle3")
    assert result.exit_code == 0, result.output
    assert "image 127.0.0.1:9/not/a-registry:1: not in a registry, not pinned" in result.output
    assert read_lock(lock_path(path)).images["127.0.0.1:9/not/a-registry:1"]["image_digest"] is None
    # an older lock: the EAGLE-3 head pinned at its first commit (as if `main` moved upstream since)
    lock_path(path).write_text(lock_path(path).read_text().replace(new, old))
    result = _cli("lock", "inventory.py")
    assert result.exit_code == 0, result.output
    assert read_lock(lock_path(path)).models[(EAGLE, "main")].commit == old, "pins are kept without --upgrade"
    assert "nvidia/Llama-3.3-70B-Instruct-FP4: locked at" in result.output  # missing entries are added
    assert build_plans(load_inventory(path), "eagle3")["s1"].pins["draft"].commit == old
    # --upgrade of one repo moves only that pin and says so
    result = _cli("lock", "inventory.py", "--upgrade", EAGLE)
    assert result.exit_code == 0, result.output
    assert f"{EAGLE}: {old[:12]} -> {new[:12]}" in result.output.splitlines()
    assert "openai/gpt-oss-120b" not in result.output
    assert read_lock(lock_path(path)).models[(EAGLE, "main")].commit == new
    result = _cli("lock", "--upgrade", "inventory.py")
    assert f"{EAGLE}: unchanged ({new[:12]})" in result.output and "openai/gpt-oss-120b: unchanged" in result.output
    # naming a repo no host uses is an error, and names without --upgrade too
    assert _cli("lock", "inventory.py", "--upgrade", "nvidia/nope").exit_code == 2
    assert _cli("lock", "inventory.py", EAGLE).exit_code == 2


def test_lock_notes_a_draft_revision_other_profiles_lack(fleet_file, hub, standin_token):
    old = HubStandin.commits(EAGLE)[0]
    path = _fleet(fleet_file, hub, "127.0.0.1:9/not/a-registry:1", s2={"draft_revision": old})
    result = _cli("lock", "inventory.py")
    assert result.exit_code == 0, result.output
    assert f"s2: draft_revision: revision '{old}' not found in nvidia/Llama-3.1-8B-Instruct-FP4: not locked" in result.output
    lock = read_lock(lock_path(path))
    assert lock.models[(EAGLE, old)].commit == old and lock.models[(EAGLE, "main")].commit == HubStandin.commit(EAGLE)
    with pytest.raises(PlanError) as exc:
        build_plans(load_inventory(path), "draft_target")
    assert exc.value.lines == [f"s2: draft_revision: nvidia/Llama-3.1-8B-Instruct-FP4 at '{old}' is not in {path}.lock "
                               "(run: specfleet lock inventory.py)"]


def test_lock_refuses_what_the_hub_refuses_and_writes_nothing(fleet_file, hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    path = _fleet(fleet_file, hub, "127.0.0.1:9/not/a-registry:1")
    result = _cli("lock", "inventory.py", "--profile", "draft_target")
    assert result.exit_code == 2
    assert "s1: hf_token: nvidia/Llama-3.3-70B-Instruct-FP4 is gated" in result.output
    assert not lock_path(path).exists()


def test_an_image_pinned_in_the_lock_is_pulled_and_run_by_digest(fleet_file):
    import yaml as _yaml

    from specfleet.fleet.inventory import load_inventory
    from specfleet.pins.lockfile import lock_path
    from specfleet.plan import build_plans, pinned_image
    from specfleet.serving.render import unit_text

    digest = "sha256:" + "d" * 64
    path = fleet_file("all:\n  hosts:\n    spark-01:\n")
    lock = _yaml.safe_load(lock_path(path).read_text())
    unpinned = build_plans(load_inventory(path), "eagle3")["spark-01"]
    for ref in lock["images"]:
        lock["images"][ref] = {"image_digest": digest}
    lock_path(path).write_text(_yaml.safe_dump(lock))
    plan = build_plans(load_inventory(path), "eagle3")["spark-01"]
    assert plan.settings.image == f"nvcr.io/nvidia/tensorrt-llm/release@{digest}"
    assert f" nvcr.io/nvidia/tensorrt-llm/release@{digest} " in unit_text(plan.settings).replace("\\\n", " ")
    assert plan.release_id != unpinned.release_id, "the release id covers the digest"
    assert pinned_image("localhost:5000/a/b:1.0", digest) == f"localhost:5000/a/b@{digest}"
    assert pinned_image("name", digest) == f"name@{digest}"
