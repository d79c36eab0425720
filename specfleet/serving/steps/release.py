"""Config: the release this converge serves, staged under releases/<id>/ (rendered config, unit, smoke request, draft
link, release.json) by one host tool command from one bundle (serving/host/release_stage.py: a new release appears
whole). The id is a content hash, so an unchanged fleet stages nothing.

Then the staged options are checked with the image's own engine (engines/check.py: TensorRT-LLM's argument classes on
the config, vLLM's serve parser on the unit's arguments; a short `docker run --rm --network none` on the host), only
when the host has no cached OK verdict for (config hash, image id). A refusal fails the host here, before activate, so
nothing that serves changes."""

from __future__ import annotations

import json
import shlex
import time

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from ...engines.check import in_image_check
from ...fleet.steps.state import current_plan, differs, needs_validation, wanted_files
from ...host.layout import DRAFT_LINK, RECORD_FILE


@deploy("Release")
def release():
    plan = current_plan()
    layout = plan.paths
    rid = plan.release_id
    rdir = layout.release_dir(rid)
    ours = (layout.releases, rdir)
    if any(differs(plan, path) for path in wanted_files(plan) if path in ours or path.startswith(rdir + "/")):
        files, draft = {}, None
        for path, content in plan.files().items():
            if path.startswith(layout.current + "/"):
                files[path.rsplit("/", 1)[1]] = content
        if "draft" in plan.pins:
            draft = layout.draft_dir(plan.pins["draft"].repo, plan.pins["draft"].commit)
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        record = json.dumps(plan.release_record(created), indent=1) + "\n"
        server.shell(name=f"Stage release {rid} ({', '.join(sorted(files))}, {RECORD_FILE}"
                          + (f", {DRAFT_LINK}" if draft else "") + ")",
                     commands=[shlex.join(layout.stage_argv(rid, files, record, draft))])
    if needs_validation(plan):
        s = plan.settings
        what, command = in_image_check(s, host.name, f"{rdir}/{s.engine.options_file}", plan.rendered.config)
        server.shell(name=f"Validate {rid}'s {what} with {s.image}'s own {s.engine.checked_by}", commands=[command])
