"""Config: the release this converge serves, staged under releases/<id>/ (rendered config, unit, smoke
request, draft link, release.json). The id is a content hash, so an unchanged fleet stages nothing.

Then the staged config is validated with the image's own TensorRT-LLM argument classes (validate_in_image:
a short `docker run --rm --network none` on the host), only when the host has no cached OK verdict for
(config hash, image id). A refusal fails the host here, before activate, so nothing that serves changes."""

from __future__ import annotations

import json
import time
from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server

from ..host.layout import CONFIG_FILE, DRAFT_LINK, RECORD_FILE
from ..validate_in_image import host_command
from .state import current_plan, differs, needs_validation


@deploy("Release")
def release():
    plan = current_plan()
    layout = plan.paths
    rid = plan.release_id
    rdir = layout.release_dir(rid)
    for path, what in ((layout.releases, "Releases directory"), (rdir, f"Release {rid}")):
        if differs(plan, path):
            files.directory(name=what, path=path, user="root", group="root", mode="755")
    for path, content in plan.files().items():
        name = path.rsplit("/", 1)[1]
        if path.startswith(layout.current + "/") and differs(plan, f"{rdir}/{name}"):
            files.put(name=f"Release {rid}: {name}", src=StringIO(content), dest=f"{rdir}/{name}",
                      user="root", group="root", mode="644")
    if "draft" in plan.pins and differs(plan, f"{rdir}/{DRAFT_LINK}"):
        pin = plan.pins["draft"]
        files.link(name=f"Release {rid}: draft -> {pin.repo}@{pin.commit[:12]}", path=f"{rdir}/{DRAFT_LINK}",
                   target=layout.draft_dir(pin.repo, pin.commit), symbolic=True)
    if differs(plan, f"{rdir}/{RECORD_FILE}"):
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        files.put(name=f"Release {rid}: {RECORD_FILE}",
                  src=StringIO(json.dumps(plan.release_record(created), indent=1) + "\n"),
                  dest=f"{rdir}/{RECORD_FILE}", user="root", group="root", mode="644")
    if needs_validation(plan):
        s = plan.settings
        server.shell(name=f"Validate {rid}'s extra-llm-api-config.yml with {s.image}'s own TensorRT-LLM",
                     commands=[host_command(host.name, s.data_dir, f"{rdir}/{CONFIG_FILE}",
                                            plan.rendered.config, s.image, s.gpus, s.llm_schema.contract)])
