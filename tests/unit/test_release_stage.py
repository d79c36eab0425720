"""Staging a release from one bundle (serving/host/release_stage.py, `specfleet-host stage`; the converge's side in
serving/steps/release.py): the host tool run on a scratch data directory with the command line the controller builds
(Layout.stage_argv), and the converge's commands on pyinfra's @fake connector."""

from __future__ import annotations

import base64
import json
import os
import re

import pytest

from specfleet.host.layout import Layout
from specfleet.serving.host import specfleet_host as sfh
from specfleet.steps import converge
from tests.unit.conftest import TOKEN
from tests.unit.fakehost import executed, make_plans, run_deploy
from tests.unit.test_deploy_fake import FRESH

RID = "r-0123456789ab"
FILES = {"extra-llm-api-config.yml": "max_batch_size: 4\n", "specfleet-trtllm.service": "[Unit]\n",
         "smoke.json": "{}\n"}
RECORD = json.dumps({"id": RID, "created": "2026-11-28T00:00:00Z", "service": "specfleet-trtllm"}) + "\n"


def _stage(data, files=FILES, record=RECORD, draft="default", rid=RID) -> tuple[int, str]:
    """Run the host tool's stage as the converge's command line asks it; (exit code, what it said)."""
    layout = Layout(str(data))
    draft = f"{layout.drafts}/org--draft/c0ffee" if draft == "default" else draft
    argv = layout.stage_argv(rid, files, record, draft)
    assert argv[:4] == [layout.host_tool, "--data-dir", str(data), "stage"]
    return _run(argv[1:])


def _run(args) -> tuple[int, str]:
    import contextlib
    import io
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = sfh.main(args)
    return code, out.getvalue() + err.getvalue()


def _listing(data) -> dict[str, str]:
    top = data / "releases"
    out = {"releases": oct(top.stat().st_mode & 0o777)} if top.is_dir() and any(top.iterdir()) else {}
    for root, dirs, names in os.walk(top):
        for name in dirs + names:
            p = os.path.join(root, name)
            rel = os.path.relpath(p, data)
            out[rel] = f"-> {os.readlink(p)}" if os.path.islink(p) else oct(os.stat(p).st_mode & 0o777)
    return out


def test_a_new_release_appears_whole(tmp_path):
    mask = os.umask(0o027)  # a host whose root umask is stricter: the release is still world-readable, as wanted
    try:
        code, said = _stage(tmp_path)
    finally:
        os.umask(mask)
    assert code == 0, said
    rdir = tmp_path / "releases" / RID
    assert {p.name: p.read_text() for p in rdir.iterdir() if not p.is_symlink()} == {**FILES, "release.json": RECORD}
    assert _listing(tmp_path) == {
        "releases": "0o755", f"releases/{RID}": "0o755", f"releases/{RID}/release.json": "0o644",
        **{f"releases/{RID}/{name}": "0o644" for name in FILES},
        f"releases/{RID}/draft": f"-> {tmp_path}/drafts/org--draft/c0ffee"}  # nothing hidden left beside it
    assert "staged r-0123456789ab: draft, extra-llm-api-config.yml, release.json" in said
    assert sfh.Host(str(tmp_path)).record(RID)["id"] == RID


def test_a_stage_cut_short_leaves_no_release_and_the_next_one_completes_it(tmp_path):
    """A controller or host that died mid-stage leaves only the hidden build directory: the host tool finds no
    release (never half of one), and the next stage starts it over."""
    partial = tmp_path / "releases" / f".stage-{RID}"
    other = tmp_path / "releases" / ".stage-r-0000000000ff"  # another id's, never staged again: removed too
    for d in (partial, other):
        d.mkdir(parents=True)
        (d / "smoke.json").write_text("{")
        (d / "release.json").write_text(RECORD)
    with pytest.raises(sfh.Fail, match="not found on this host"):
        sfh.Host(str(tmp_path)).record(RID)
    assert sfh.Host(str(tmp_path)).status()["releases"] == []  # the host's status lists no release
    assert _stage(tmp_path)[0] == 0
    assert not partial.exists() and not other.exists()
    assert (tmp_path / "releases" / RID / "smoke.json").read_text() == "{}\n"


def test_a_staged_release_is_repaired_in_place_and_keeps_its_record(tmp_path):
    assert _stage(tmp_path)[0] == 0
    rdir = tmp_path / "releases" / RID
    (rdir / "smoke.json").write_text("")  # damaged
    later = RECORD.replace("2026-11-28T00:00:00Z", "2026-12-01T00:00:00Z")
    code, said = _stage(tmp_path, record=later)
    assert code == 0 and "staged r-0123456789ab: smoke.json" in said, said
    assert (rdir / "smoke.json").read_text() == "{}\n" and (rdir / "release.json").read_text() == RECORD
    (rdir / "smoke.json").chmod(0o600)  # a mode gone wrong (a hand edit): the status read says it differs
    os.chmod(rdir, 0o750)
    assert _stage(tmp_path, record=later)[0] == 0
    assert _listing(tmp_path)[f"releases/{RID}/smoke.json"] == "0o644" and _listing(tmp_path)[f"releases/{RID}"] == "0o755"
    assert _stage(tmp_path, record=later)[1].strip() == "staged r-0123456789ab: nothing to write"
    (rdir / "release.json").write_text("")  # emptied by a power loss right after the stage
    assert _stage(tmp_path, record=later)[0] == 0 and (rdir / "release.json").read_text() == later


@pytest.mark.parametrize("files, draft, rid, why", [
    ({"../x": "a"}, None, RID, "'../x' is not a release file name"),
    ({".hidden": "a"}, None, RID, "'.hidden' is not a release file name"),
    ({"release.json": "{}"}, None, RID, "'release.json' is not a release file name"),
    ({"draft": "x"}, None, RID, "'draft' is not a release file name"),
    ({}, None, RID, "the bundle has no files"),
    (FILES, "/etc", RID, "the draft link's target '/etc' is not under"),
    (FILES, "DRAFTS/../../etc", RID, "is not under"),
    (FILES, None, "r-../../etc", "is not a release id"),
    (FILES, None, "current", "is not a release id"),
])
def test_a_bundle_with_anything_but_a_releases_files_is_refused_and_writes_nothing(tmp_path, files, draft, rid, why):
    draft = draft.replace("DRAFTS", f"{tmp_path}/drafts") if draft else None
    code, said = _stage(tmp_path, files=files, draft=draft, rid=rid)
    assert code == 1 and said.startswith("specfleet-host: stage: ") and why in said, said
    assert _listing(tmp_path) == {}  # no release directory, nor anything in releases/


def test_a_bundle_that_is_not_one_is_refused(tmp_path):
    bad = base64.b64encode(b'{"files": {}}').decode()
    for bundle in ("not base64!", bad, base64.b64encode(b"[]").decode()):
        code, said = _run(["--data-dir", str(tmp_path), "stage", RID, "--bundle", bundle])
        assert code == 1 and "specfleet-host: stage: the bundle" in said, said
    assert not (tmp_path / "releases" / RID).exists()


def test_a_fresh_converge_stages_the_release_in_one_command_with_no_secret():
    """The converge's side: one host tool command for the whole release (it was a stat, an upload, a move, a chown
    and a chmod per file), whose bundle holds the rendered files and no token."""
    plans = make_plans({"spark-01": {}}, "eagle3")  # the token from HF_TOKEN (tests/unit/conftest.py)
    plan = plans["spark-01"]
    cmds = executed(run_deploy(plans, converge, "eagle3", responses=lambda p: FRESH))["spark-01"]
    rdir = plan.paths.release_dir(plan.release_id)
    stages = [c for c in cmds if f" stage {plan.release_id} --bundle " in c]
    assert len(stages) == 1, cmds
    # no file operation of pyinfra's on the release directory (files.put: ... mv, chown, chmod; files.link: ln -s)
    assert not [c for c in cmds if re.search(rf"(chmod|chown|mv|ln -s|mkdir -p) (\S+ )*'?{re.escape(rdir)}", c)], cmds
    bundle = json.loads(base64.b64decode(stages[0].rsplit("--bundle ", 1)[1].split()[0].strip("'")))
    assert sorted(bundle["files"]) == ["extra-llm-api-config.yml", "smoke.json", "specfleet-trtllm.service"]
    assert bundle["files"]["extra-llm-api-config.yml"] == plan.rendered.config
    assert json.loads(bundle["record"])["id"] == plan.release_id and bundle["draft"].startswith(plan.paths.drafts)
    assert plan.settings.hf_token is not None and TOKEN not in json.dumps(bundle) and TOKEN not in stages[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="ownership is repaired by root (the host tool runs as root)")
def test_an_owner_gone_wrong_is_made_roots_again(tmp_path):
    """The status read wants root:root on releases/ and everything in a release: a stage repairs an owner (a hand
    `chown`) as it repairs a mode, or every converge would find the release differing and stage it again."""
    assert _stage(tmp_path)[0] == 0
    rdir = tmp_path / "releases" / RID
    for path in (tmp_path / "releases", rdir, rdir / "smoke.json", rdir / "release.json"):
        os.chown(path, 65534, 65534)
    assert _stage(tmp_path)[0] == 0
    for path in (tmp_path / "releases", rdir, rdir / "smoke.json", rdir / "release.json"):
        assert (path.stat().st_uid, path.stat().st_gid) == (0, 0), path
