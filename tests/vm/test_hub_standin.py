"""Tests of the Hugging Face Hub STAND-IN (tests/vm/hub_standin.py), driven by the REAL huggingface_hub client.

Fast, no VM: the stand-in runs in-process on an ephemeral port (or as a subprocess for the script-mode test).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import requests  # noqa: E402
from huggingface_hub import (  # noqa: E402
    HfApi,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    scan_cache_dir,
    snapshot_download,
)
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    GatedRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get  # noqa: E402
from huggingface_hub.hf_api import RepoFile, RepoFolder  # noqa: E402
from huggingface_hub.utils import filter_repo_objects  # noqa: E402

from tests.vm.hub_standin import (  # noqa: E402
    REPOS,
    STANDIN_TIKTOKEN_SHA256,
    STANDIN_TOKEN,
    HubStandin,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
GPT_OSS = "openai/gpt-oss-120b"
EAGLE = "nvidia/gpt-oss-120b-Eagle3-long-context"
GATED = "nvidia/Llama-3.3-70B-Instruct-FP4"
LLAMA8B = "nvidia/Llama-3.1-8B-Instruct-FP4"
SKIP = ["original/*", "metal/*"]


@pytest.fixture(autouse=True)
def _hf_env(monkeypatch, tmp_path):
    """Plain HTTP (no Xet), no telemetry, and never pick up a real token from the machine running the tests."""
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token-here"))


@pytest.fixture(scope="module")
def hub():
    with HubStandin() as h:
        yield h


@pytest.fixture
def fresh_hub():
    """A private instance, for tests that change the throttle or need an empty log."""
    with HubStandin() as h:
        yield h


def _file_bytes(served: dict[str, int], repo_id: str, sha: str) -> dict[str, int]:
    """{repo file path: body bytes served} for /resolve/ GETs of one repo@sha."""
    prefix = f"/{repo_id}/resolve/{sha}/"
    return {p[len(prefix):]: n for p, n in served.items() if p.startswith(prefix)}


def _sub_env(tmp_path: Path, **extra) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HOME=str(tmp_path / "hf_home"), PYTHONPATH=str(REPO_ROOT))
    env.pop("HF_TOKEN", None)
    env.update(extra)
    return env


# ----------------------------------------------------------------------------------------------------------------
# metadata
# ----------------------------------------------------------------------------------------------------------------


def test_commit_shas_are_stable_and_deterministic():
    # Pinned: the VM harness and the product's fixtures may hard-code these.
    assert HubStandin.commit(GPT_OSS) == "6aad12f1921f2f475ef21e766ed43b5a9995401e"
    assert HubStandin.commits(EAGLE) == ["27bd190bde5dbce26f711fdee9730728a785c998",
                                         "7dff77f76a863f3efdca4ea39d6492781194e19d"]
    assert HubStandin.commit(EAGLE) == HubStandin.commit(EAGLE, 1) != HubStandin.commit(EAGLE, 0)
    for repo_id in REPOS:
        assert len(HubStandin.commit(repo_id)) == 40
    # content derives only from (repo, path, version): recomputing gives the same bytes
    data = HubStandin.file_bytes(GPT_OSS, "model-00000-of-00002.safetensors")
    assert hashlib.sha256(data).hexdigest() == HubStandin.file_meta(GPT_OSS, "model-00000-of-00002.safetensors")["etag"]


def test_layouts_sizes_and_valid_files():
    files = HubStandin.files(GPT_OSS)
    assert set(files) == {
        ".gitattributes", "LICENSE", "README.md", "USAGE_POLICY", "chat_template.jinja", "config.json",
        "generation_config.json", "model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors",
        "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "original/config.json", "original/dtypes.json", "original/model--00001-of-00002.safetensors",
        "original/model--00002-of-00002.safetensors", "metal/model.bin",
    }
    root_weights = sum(s for p, s in files.items() if "/" not in p and p.endswith(".safetensors"))
    assert 1 * 2**20 <= files["model-00000-of-00002.safetensors"] <= 2 * 2**20
    assert sum(s for p, s in files.items() if p.startswith("original/")) >= root_weights
    assert files["metal/model.bin"] >= root_weights
    for p, s in files.items():
        if not p.endswith((".safetensors", ".bin")):
            assert s < 4096, p
    assert set(HubStandin.files(EAGLE)) == {"config.json", "model.safetensors", "README.md"}
    assert "hf_quant_config.json" in HubStandin.files(GATED) and HubStandin.is_gated(GATED)
    assert "model.safetensors" in HubStandin.files(LLAMA8B) and not HubStandin.is_gated(LLAMA8B)
    # every config.json is valid JSON resembling a real one
    for repo_id in REPOS:
        cfg = json.loads(HubStandin.file_bytes(repo_id, "config.json"))
        assert cfg["architectures"] and cfg["model_type"]
    # safetensors files are valid (header length + JSON header whose offsets cover the rest of the file)
    data = HubStandin.file_bytes(GATED, "model-00001-of-00002.safetensors")
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    assert 8 + n + end == len(data)
    index = json.loads(HubStandin.file_bytes(GATED, "model.safetensors.index.json"))
    assert set(index["weight_map"].values()) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_model_info_files_metadata(hub):
    api = HfApi(endpoint=hub.url)
    sha = HubStandin.commit(GPT_OSS)
    for revision in (sha, "main", None):
        info = api.model_info(GPT_OSS, revision=revision, files_metadata=True, token=False)
        assert info.sha == sha and info.id == GPT_OSS and info.gated is False and info.private is False
        assert info.last_modified is not None
    sizes = {s.rfilename: s.size for s in info.siblings}
    assert sizes == HubStandin.files(GPT_OSS)
    sib = {s.rfilename: s for s in info.siblings}
    shard = sib["model-00000-of-00002.safetensors"]
    assert shard.lfs is not None and shard.lfs.size == shard.size
    assert shard.lfs.sha256 == hashlib.sha256(HubStandin.file_bytes(GPT_OSS, shard.rfilename)).hexdigest()
    assert sib["config.json"].lfs is None and len(sib["config.json"].blob_id) == 40
    assert HubStandin.repo_size(GPT_OSS) == sum(sizes.values())
    # what the product does on the controller: filter locally, sum sizes
    wanted = list(filter_repo_objects(items=list(sizes), ignore_patterns=SKIP))
    assert not any(p.startswith(("original/", "metal/")) for p in wanted) and "config.json" in wanted
    # without files_metadata: names only
    assert api.model_info(GPT_OSS, token=False).siblings[0].size is None
    # expand selects properties
    info = api.model_info(GPT_OSS, expand=["sha", "gated"], token=False)
    assert info.sha == sha and info.siblings is None
    # gated repo info is readable anonymously (like the real Hub); only files are gated
    info = api.model_info(GATED, files_metadata=True, token=False)
    assert info.gated == "auto" and {s.rfilename for s in info.siblings} == set(HubStandin.files(GATED))


def test_list_repo_tree(hub):
    api = HfApi(endpoint=hub.url)
    sha = HubStandin.commit(GPT_OSS)
    entries = list(api.list_repo_tree(GPT_OSS, revision=sha, recursive=True, token=False))
    files = {e.path: e.size for e in entries if isinstance(e, RepoFile)}
    assert files == HubStandin.files(GPT_OSS)
    assert {e.path for e in entries if isinstance(e, RepoFolder)} == {"original", "metal"}
    assert all(e.xet_hash is None for e in entries if isinstance(e, RepoFile))
    top = list(api.list_repo_tree(GPT_OSS, revision=sha, token=False))
    assert "original/config.json" not in {e.path for e in top} and "original" in {e.path for e in top}
    sub = list(api.list_repo_tree(GPT_OSS, "original", revision=sha, expand=True, token=False))
    assert {e.path for e in sub} == {p for p in files if p.startswith("original/")}
    assert all(e.last_commit is not None and e.last_commit.oid == sha for e in sub)


def test_errors_map_to_huggingface_hub_exceptions(hub, tmp_path):
    api = HfApi(endpoint=hub.url)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("openai/no-such-model", token=False)
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("openai/no-such-model", "config.json", cache_dir=tmp_path, endpoint=hub.url, token=False)
    with pytest.raises(RevisionNotFoundError):
        api.model_info(GPT_OSS, revision="0" * 40, token=False)
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(GPT_OSS, revision="no-such-branch", cache_dir=tmp_path, endpoint=hub.url, token=False)
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(GPT_OSS, "nope.json", revision=HubStandin.commit(GPT_OSS), cache_dir=tmp_path,
                        endpoint=hub.url, token=False)


def test_resolve_headers_plain_http_no_xet(hub):
    sha = HubStandin.commit(GPT_OSS)
    for path in ("model-00000-of-00002.safetensors", "config.json"):
        url = hf_hub_url(GPT_OSS, path, revision=sha, endpoint=hub.url)
        meta = get_hf_file_metadata(url, token=False, endpoint=hub.url)
        fm = HubStandin.file_meta(GPT_OSS, path)
        assert meta.xet_file_data is None  # plain HTTP, never Xet
        assert meta.commit_hash == sha
        assert meta.size == fm["size"]
        assert meta.etag == (fm["lfs"]["sha256"] if fm["lfs"] else fm["blob_id"])
        r = requests.head(url, timeout=10)
        assert r.status_code == 200 and r.headers["Accept-Ranges"] == "bytes"
        assert not [h for h in r.headers if h.lower().startswith("x-xet")] and "Link" not in r.headers
        assert ("X-Linked-Etag" in r.headers) == (fm["lfs"] is not None)


def test_range_requests(hub):
    path = "model-00001-of-00002.safetensors"
    data = HubStandin.file_bytes(GPT_OSS, path)
    url = hf_hub_url(GPT_OSS, path, revision=HubStandin.commit(GPT_OSS), endpoint=hub.url)
    r = requests.get(url, headers={"Range": "bytes=1000-1999"}, timeout=10)
    assert r.status_code == 206 and r.content == data[1000:2000]
    assert r.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
    r = requests.get(url, headers={"Range": "bytes=-100"}, timeout=10)
    assert r.status_code == 206 and r.content == data[-100:]
    r = requests.get(url, headers={"Range": f"bytes={len(data)}-"}, timeout=10)
    assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{len(data)}"
    # huggingface_hub's own resume path (Range: bytes=N-) writes the rest of the file
    import io

    buf = io.BytesIO(data[:12345])
    buf.seek(0, 2)
    http_get(url, buf, resume_size=12345, expected_size=len(data))
    assert buf.getvalue() == data


# ----------------------------------------------------------------------------------------------------------------
# downloads
# ----------------------------------------------------------------------------------------------------------------


def test_snapshot_download_skips_original_and_metal_and_second_run_is_free(fresh_hub, tmp_path):
    hub = fresh_hub
    sha = HubStandin.commit(GPT_OSS)
    files = HubStandin.files(GPT_OSS)
    root = {p: s for p, s in files.items() if "/" not in p}
    path = snapshot_download(GPT_OSS, revision=sha, cache_dir=tmp_path, ignore_patterns=SKIP,
                             endpoint=hub.url, token=False)
    assert sorted(os.listdir(path)) == sorted(root)
    for p in root:
        assert Path(path, p).read_bytes() == HubStandin.file_bytes(GPT_OSS, p)

    served = _file_bytes(hub.bytes_served(), GPT_OSS, sha)
    assert not any(p.startswith(("original/", "metal/")) and n for p, n in served.items())
    assert served == root  # each root file exactly once, nothing else
    total = hub.total_bytes()  # + model_info-less API calls (tree listing JSON)
    assert sum(root.values()) <= total < sum(root.values()) + 64 * 1024
    assert total < 0.5 * HubStandin.repo_size(GPT_OSS)
    api_calls = [p for m, p, _ in hub.requests() if p.startswith("/api/")]
    assert api_calls == [f"/api/models/{GPT_OSS}/tree/{sha}"]  # given a sha: tree listing only, no model_info

    # second run: huggingface_hub 2.4.0 caches the tree listing under trees/<sha>.json and returns cached
    # pointers for a commit-sha revision => no HTTP request at all
    hub.reset_log()
    assert snapshot_download(GPT_OSS, revision=sha, cache_dir=tmp_path, ignore_patterns=SKIP,
                             endpoint=hub.url, token=False) == path
    assert sum(_file_bytes(hub.bytes_served(), GPT_OSS, sha).values()) == 0
    assert hub.requests() == []
    # with revision="main" only the revision is resolved (one model-info call), still 0 file bytes
    snapshot_download(GPT_OSS, cache_dir=tmp_path, ignore_patterns=SKIP, endpoint=hub.url, token=False)
    assert hub.requests() == [("GET", f"/api/models/{GPT_OSS}/revision/main", 200)]
    assert sum(_file_bytes(hub.bytes_served(), GPT_OSS, sha).values()) == 0

    # the cache is a normal HF cache
    info = scan_cache_dir(tmp_path)
    assert not info.warnings
    (repo,) = [r for r in info.repos if r.repo_id == GPT_OSS]
    (rev,) = repo.revisions
    assert rev.commit_hash == sha and rev.nb_files == len(root) and repo.size_on_disk == sum(root.values())
    out = subprocess.run(["hf", "cache", "ls", "--cache-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and GPT_OSS in out.stdout, out.stderr


def test_gated_repo(fresh_hub, tmp_path):
    hub = fresh_hub
    api = HfApi(endpoint=hub.url)
    page = f"{hub.url}/{GATED}"
    with pytest.raises(GatedRepoError) as exc:
        api.auth_check(GATED, token=False)
    assert page in str(exc.value) and exc.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as exc:
        api.auth_check(GATED, token="hf_wrong_token")
    assert page in str(exc.value) and exc.value.response.status_code == 403
    api.auth_check(GATED, token=STANDIN_TOKEN)
    api.auth_check(LLAMA8B, token=False)  # not gated
    with pytest.raises(RepositoryNotFoundError):
        api.auth_check("nvidia/no-such-model", token=STANDIN_TOKEN)

    sha = HubStandin.commit(GATED)
    with pytest.raises(GatedRepoError) as exc:
        snapshot_download(GATED, revision=sha, cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert page in str(exc.value)
    with pytest.raises(GatedRepoError):
        hf_hub_download(GATED, "config.json", revision=sha, cache_dir=tmp_path, endpoint=hub.url,
                        token="hf_wrong_token")
    r = requests.get(f"{hub.url}/{GATED}/resolve/{sha}/config.json", timeout=10)
    assert r.status_code == 401 and r.headers["X-Error-Code"] == "GatedRepo"
    assert sum(_file_bytes(hub.bytes_served(), GATED, sha).values()) == 0  # nothing leaked

    path = snapshot_download(GATED, revision=sha, cache_dir=tmp_path, endpoint=hub.url, token=STANDIN_TOKEN)
    assert json.loads(Path(path, "hf_quant_config.json").read_text())["quantization"]["quant_algo"] == "NVFP4"
    assert sorted(os.listdir(path)) == sorted(HubStandin.files(GATED))


def test_older_commit_downloadable_by_sha(hub, tmp_path):
    old, new = HubStandin.commit(EAGLE, 0), HubStandin.commit(EAGLE)
    assert HfApi(endpoint=hub.url).model_info(EAGLE, files_metadata=True, token=False).sha == new
    p_old = snapshot_download(EAGLE, revision=old, cache_dir=tmp_path, endpoint=hub.url, token=False)
    p_new = snapshot_download(EAGLE, revision=new, cache_dir=tmp_path, endpoint=hub.url, token=False)
    assert p_old.endswith(old) and p_new.endswith(new)
    for f in ("model.safetensors", "config.json"):
        assert Path(p_old, f).read_bytes() == HubStandin.file_bytes(EAGLE, f, commit=old)
        assert Path(p_old, f).read_bytes() != Path(p_new, f).read_bytes()
    assert Path(p_old, "README.md").resolve() == Path(p_new, "README.md").resolve()  # same blob
    assert json.loads(Path(p_old, "config.json").read_text())["max_position_embeddings"] == 32768
    assert HubStandin.repo_size(EAGLE, old) != HubStandin.repo_size(EAGLE, new)


def test_tiktoken_files(hub):
    for name, digest in STANDIN_TIKTOKEN_SHA256.items():
        r = requests.get(f"{hub.url}/encodings/{name}", timeout=10)
        assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == digest
        assert 1024 < len(r.content) < 16 * 1024
        seen = set()
        for rank, line in enumerate(r.content.decode().splitlines()):
            tok, r_ = line.split(" ")
            assert int(r_) == rank
            seen.add(base64.b64decode(tok, validate=True))
        assert len(seen) == rank + 1 and all(bytes([b]) in seen for b in range(256))
        assert hub.bytes_served()[f"/encodings/{name}"] >= len(r.content)
    assert len(set(STANDIN_TIKTOKEN_SHA256.values())) == 2
    assert requests.get(f"{hub.url}/encodings/r50k_base.tiktoken", timeout=10).status_code == 404


# ----------------------------------------------------------------------------------------------------------------
# control: throttle, log, interruption, script mode
# ----------------------------------------------------------------------------------------------------------------


def test_throttle_slows_a_download(fresh_hub, tmp_path):
    hub = fresh_hub
    old = HubStandin.commit(EAGLE, 0)
    size = HubStandin.files(EAGLE, old)["model.safetensors"]
    assert size > 2**20
    hub.set_throttle(512 * 1024)
    t0 = time.monotonic()
    hf_hub_download(EAGLE, "model.safetensors", revision=old, cache_dir=tmp_path / "a", endpoint=hub.url, token=False)
    slow = time.monotonic() - t0
    hub.set_throttle(None)
    t0 = time.monotonic()
    hf_hub_download(EAGLE, "model.safetensors", revision=old, cache_dir=tmp_path / "b", endpoint=hub.url, token=False)
    fast = time.monotonic() - t0
    assert slow > 0.5 and slow > fast, (slow, fast)


def test_http_control_endpoints(fresh_hub):
    hub = fresh_hub
    url = hf_hub_url(LLAMA8B, "config.json", revision=HubStandin.commit(LLAMA8B), endpoint=hub.url)
    assert requests.get(url, timeout=10).status_code == 200
    log = requests.get(f"{hub.url}/_standin/log", timeout=10).json()
    key = f"/{LLAMA8B}/resolve/{HubStandin.commit(LLAMA8B)}/config.json"
    assert log["bytes"] == {key: HubStandin.files(LLAMA8B)["config.json"]}
    assert log["requests"] == [["GET", key, 200]]  # control calls are not logged
    assert requests.post(f"{hub.url}/_standin/throttle?bps=4096", timeout=10).json()["throttle_bps"] == 4096
    assert hub.throttle_bps == 4096
    requests.post(f"{hub.url}/_standin/throttle?bps=0", timeout=10)
    assert hub.throttle_bps is None
    requests.post(f"{hub.url}/_standin/reset", timeout=10)
    assert hub.requests() == [] and hub.bytes_served() == {}
    assert requests.get(f"{hub.url}/_standin/log", timeout=10).json() == {"bytes": {}, "requests": [],
                                                                          "throttle_bps": None}


_DOWNLOAD_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from huggingface_hub import snapshot_download
    token = Path(os.environ["HF_TOKEN_PATH"]).read_text().strip()
    print(snapshot_download(sys.argv[1], revision=sys.argv[2], cache_dir=sys.argv[3], endpoint=sys.argv[4],
                            token=token, ignore_patterns=["original/*", "metal/*"]))
    """
)


def test_interrupted_download_completes_in_a_new_process(fresh_hub, tmp_path):
    hub = fresh_hub
    sha = HubStandin.commit(GATED)
    cache = tmp_path / "cache"
    token_file = tmp_path / "token"
    token_file.write_text(STANDIN_TOKEN + "\n")
    env = _sub_env(tmp_path, HF_TOKEN_PATH=str(token_file))
    cmd = [sys.executable, "-c", _DOWNLOAD_SCRIPT, GATED, sha, str(cache), hub.url]
    shards = {p: s for p, s in HubStandin.files(GATED).items() if p.endswith(".safetensors")}
    keys = [f"/{GATED}/resolve/{sha}/{p}" for p in shards]

    hub.set_throttle(256 * 1024)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while max(hub.bytes_served().get(k, 0) for k in keys) < 128 * 1024:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "download never started"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    assert hub.wait_idle(10)  # the server notices the dead client on its next write
    first = {k: hub.bytes_served().get(k, 0) for k in keys}
    assert 0 < sum(first.values()) < sum(shards.values())  # killed midway
    # SIGKILL leaves huggingface_hub's process-unique temp file behind, and no snapshot entry for the shards
    orphans = list((cache / f"models--{GATED.replace('/', '--')}" / "blobs").glob("*.incomplete"))
    assert orphans
    assert scan_cache_dir(cache).incomplete_files

    hub.set_throttle(None)
    hub.reset_log()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    snap = Path(out.stdout.strip().splitlines()[-1])
    assert snap.name == sha
    for p in shards:
        assert Path(snap, p).read_bytes() == HubStandin.file_bytes(GATED, p)
    second = {k: hub.bytes_served().get(k, 0) for k in keys}
    # huggingface_hub 2.4.0 does NOT resume a partial file across processes: it re-fetches the whole shard
    # (the .incomplete name is unique per process) -- so a re-run costs the full shard size.
    assert second == {f"/{GATED}/resolve/{sha}/{p}": s for p, s in shards.items()}


def test_script_mode(tmp_path):
    secret = "hf_script_mode_secret_token"
    proc = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "tests/vm/hub_standin.py"), "--bind", "127.0.0.1", "--port", "0",
         "--token", secret, "--throttle-bps", "100000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        sha = HubStandin.commit(GATED)
        r = requests.get(f"{url}/{GATED}/resolve/{sha}/config.json", headers={"Authorization": f"Bearer {secret}"},
                         timeout=10)
        assert r.status_code == 200 and r.content == HubStandin.file_bytes(GATED, "config.json")
        r = requests.get(f"{url}/{GATED}/resolve/{sha}/config.json",
                         headers={"Authorization": f"Bearer {STANDIN_TOKEN}"}, timeout=10)
        assert r.status_code == 403  # only --token is accepted
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0
    size = HubStandin.files(GATED)["config.json"]
    assert f"GET /{GATED}/resolve/{sha}/config.json 200 {size}" in err.splitlines()
    assert f"GET /{GATED}/resolve/{sha}/config.json 403 " in err
    assert secret not in err and STANDIN_TOKEN not in err and "Bearer" not in err


def test_fail_next_method_and_control_endpoint(fresh_hub):
    hub = fresh_hub
    sha = HubStandin.commit(LLAMA8B)
    url = hf_hub_url(LLAMA8B, "config.json", revision=sha, endpoint=hub.url)
    api = f"{hub.url}/api/models/{LLAMA8B}/revision/{sha}"
    hub.fail_next(429, 2)  # paths="resolve": the API is not affected
    assert requests.get(api, timeout=10).status_code == 200
    r = requests.head(url, timeout=10)
    assert r.status_code == 429 and r.headers["Retry-After"] == "1"
    r = requests.get(url, timeout=10)
    assert r.status_code == 429 and "rate-limited" in r.headers["X-Error-Message"]
    assert hub.pending_failures() == 0
    assert requests.get(url, timeout=10).content == HubStandin.file_bytes(LLAMA8B, "config.json")
    key = f"/{LLAMA8B}/resolve/{sha}/config.json"
    assert [r[2] for r in hub.requests()] == [200, 429, 429, 200]  # failures are logged like any response
    assert hub.bytes_served()[key] == HubStandin.files(LLAMA8B)["config.json"]  # error bodies are not content

    hub.reset_log()
    r = requests.post(f"{hub.url}/_standin/fail?status=500&count=1&paths=api", timeout=10)
    assert r.json() == {"ok": True, "pending": 1}
    assert requests.get(url, timeout=10).status_code == 200
    r = requests.get(api, timeout=10)
    assert r.status_code == 500 and "Retry-After" not in r.headers
    assert requests.get(api, timeout=10).status_code == 200
    assert [s for _, _, s in hub.requests()] == [200, 500, 200]

    hub.fail_next(503, 3, paths="all")
    assert requests.get(f"{hub.url}/encodings/o200k_base.tiktoken", timeout=10).status_code == 503
    hub.fail_next(503, 0)  # clears
    assert hub.pending_failures() == 0 and requests.get(url, timeout=10).status_code == 200
    for bad in ("status=200&count=1", "status=429&count=-1", "status=429&paths=cdn", "status=x"):
        assert requests.post(f"{hub.url}/_standin/fail?{bad}", timeout=10).status_code == 400, bad
    with pytest.raises(ValueError):
        hub.fail_next(429, 1, paths="cdn")


def test_fail_next_seen_by_huggingface_hub(fresh_hub, tmp_path):
    """What huggingface_hub 2.4.0 itself does: http_get retries 429 (honouring Retry-After) but not 500."""
    hub = fresh_hub
    url = hf_hub_url(LLAMA8B, "config.json", revision=HubStandin.commit(LLAMA8B), endpoint=hub.url)
    hub.fail_next(429, 1)
    with open(tmp_path / "f", "wb") as f:
        http_get(url, f)
    assert (tmp_path / "f").read_bytes() == HubStandin.file_bytes(LLAMA8B, "config.json")
    hub.fail_next(500, 1)
    with open(tmp_path / "g", "wb") as f, pytest.raises(Exception) as e:
        http_get(url, f)
    assert getattr(getattr(e.value, "response", None), "status_code", None) == 500
    assert [s for _, _, s in hub.requests()] == [429, 200, 500]


def test_hold_keeps_a_file_get_in_flight_until_release(fresh_hub):
    """The fault tests' "mid-fill" point: a held GET sends nothing until release(); HEAD and other files go on."""
    import threading
    sha = HubStandin.commit(EAGLE)
    held_url = f"{fresh_hub.url}/{EAGLE}/resolve/{sha}/config.json"
    fresh_hub.hold("/config.json")
    assert requests.head(held_url, timeout=10).status_code == 200  # metadata is not held
    other = requests.get(f"{fresh_hub.url}/{EAGLE}/resolve/{sha}/README.md", timeout=10)
    assert other.status_code == 200 and other.content
    got: dict = {}
    t = threading.Thread(target=lambda: got.update(r=requests.get(held_url, timeout=60)))
    t.start()
    for _ in range(100):
        if fresh_hub.held() == 1:
            break
        time.sleep(0.05)
    assert fresh_hub.held() == 1 and not fresh_hub.bytes_served().get(f"/{EAGLE}/resolve/{sha}/config.json")
    fresh_hub.release()
    t.join(timeout=30)
    assert got["r"].status_code == 200 and len(got["r"].content) == HubStandin.files(EAGLE, sha)["config.json"]
    assert fresh_hub.held() == 0
