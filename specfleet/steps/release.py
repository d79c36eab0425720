"""Config: the release this converge serves, staged under releases/<id>/ (rendered config, unit, smoke
request, draft link, release.json). The id is a content hash, so an unchanged fleet stages nothing."""

from __future__ import annotations

import json
import time
from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files

from ._common import current_plan, host_status


@deploy("Release")
def release():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    rid = plan.release_id
    rdir = f"{p.releases}/{rid}"
    st = host_status(plan)
    files.directory(name="Releases directory", path=p.releases, mode="755")
    files.directory(name=f"Release {rid}", path=rdir, mode="755")
    for path, content in plan.files().items():
        if path.startswith(p.current + "/"):
            name = path.rsplit("/", 1)[1]
            files.put(name=f"Release {rid}: {name}", src=StringIO(content), dest=f"{rdir}/{name}", mode="644")
    if "draft" in plan.pins:
        pin = plan.pins["draft"]
        files.link(name=f"Release {rid}: draft -> {pin.repo}@{pin.commit[:12]}", path=f"{rdir}/draft",
                   target=p.draft_dir(pin.repo, pin.commit), symbolic=True)
    if f"{rdir}/release.json" not in st.exists:
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        files.put(name=f"Release {rid}: release.json", src=StringIO(json.dumps(plan.release_record(created), indent=1) + "\n"),
                  dest=f"{rdir}/release.json", mode="644")
