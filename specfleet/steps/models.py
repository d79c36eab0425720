"""Models: target and draft fetched into the host's Hugging Face cache (standard hub layout, so
`hf cache ls` lists them) at the commit pinned on the controller; only the files the server needs.
Nothing runs when every file is already there with the right size; an interrupted fetch completes on
the next run. The draft is also laid out as hard links at a stable path (drafts/<repo>/<commit>)."""

from __future__ import annotations

import shlex

from pyinfra.api import deploy
from pyinfra.operations import server

from ._common import current_plan, host_status, missing


@deploy("Models")
def models():
    plan = current_plan()
    s, p = plan.settings, plan.paths
    st = host_status(plan)
    if not st.image_id:
        server.shell(name=f"Pull {s.image}", commands=[f"docker pull {shlex.quote(s.image)}"])
    for role, pin in sorted(plan.pins.items(), key=lambda kv: kv[0] != "target"):
        todo = missing(plan, st, role)
        if not todo:
            continue
        env = (f"HF_HUB_CACHE={p.hub_cache} HF_ENDPOINT={shlex.quote(s.hub_endpoint)} HF_TOKEN_PATH={p.token_file} "
               "HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1")
        args = [f"--repo {pin.repo}", f"--commit {pin.commit}", f"--cache-dir {p.hub_cache}", f"--workers {s.fetch_workers}"]
        args += [f"--ignore {shlex.quote(pat)}" for pat in pin.ignore_patterns]
        if role == "draft":
            args.append(f"--link-dir {p.draft_dir(pin.repo, pin.commit)}")
        fetch_bytes = sum(size for path, size in todo if "/snapshots/" in path)
        server.shell(name=f"Fetch {role} {pin.repo}@{pin.commit[:12]} ({len(todo)} files missing, "
                          f"{fetch_bytes / 1e6:.1f} MB)",
                     commands=[f"env {env} {p.venv}/bin/python {p.fetch_tool} {' '.join(args)}"])
