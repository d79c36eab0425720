"""Models: target and draft fetched into the host's Hugging Face cache (standard hub layout, so
`hf cache ls` lists them) at the commit pinned on the controller; only the files the server needs.
Nothing runs when every file is already there with the right size. Each fetch (and the image's pull,
mirror/steps/images.py) is a
host job: it survives the controller, and an interrupted fetch resumes where it stopped (Range requests).
The draft is also laid out as hard links at a stable path (drafts/<repo>/<commit>)."""

from __future__ import annotations

from pyinfra.api import deploy
from pyinfra.operations import python

from ...fleet.steps.jobs import _follow
from ...fleet.steps.state import current_plan, host_status, missing
from ...mirror.steps.hub import fetch_endpoint
from ...mirror.steps.images import image_pull


def _fetch(state, host, key: str, argv: list[str], env: dict[str, str]) -> bool:
    """The fetch host job, with the Hub endpoint decided now: the mirror's warm-up ran just before (hub_fallback).
    A fallback fetch has a key of its own: it never attaches to a fetch from the mirror still running on the host."""
    endpoint = fetch_endpoint(state, host, host.data.get("specfleet"))
    if endpoint != env["HF_ENDPOINT"]:
        key = f"{key} from {endpoint}"
    return _follow(state, host, key, argv, {**env, "HF_ENDPOINT": endpoint})


@deploy("Models")
def models():
    plan = current_plan()
    s, layout = plan.settings, plan.paths
    st = host_status(plan)
    image_pull()  # nothing when the host has it; through the mirror's registry where image_mirror is on
    env = {"HF_HUB_CACHE": layout.hub_cache, "HF_ENDPOINT": s.hub_endpoint, "HF_TOKEN_PATH": layout.token_file,
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_XET": "1"}
    if plan.uses_mirror:  # a mirror answers after its own upstream round trip (and serves the whole fleet at once)
        env.update({"HF_HUB_ETAG_TIMEOUT": "120", "HF_HUB_DOWNLOAD_TIMEOUT": "120"})
    for role, pin in sorted(plan.pins.items(), key=lambda kv: kv[0] != "target"):
        todo = missing(plan, st, role)
        if not todo:
            continue
        argv = [f"{layout.venv}/bin/python", layout.fetch_tool, "--repo", pin.repo, "--commit", pin.commit,
                "--cache-dir", layout.hub_cache, "--workers", str(s.fetch_workers)]
        for pattern in pin.ignore_patterns:
            argv += ["--ignore", pattern]
        if role == "draft":
            argv += ["--link-dir", layout.draft_dir(pin.repo, pin.commit)]
        fetch_bytes = sum(size for path, size in todo if "/snapshots/" in path)
        python.call(name=f"Fetch {role} {pin.repo}@{pin.commit[:12]} "
                         f"({len(todo)} files missing, {fetch_bytes / 1e6:.1f} MB)",
                    function=_fetch, key=f"fetch:{pin.repo}@{pin.commit}", argv=argv, env=env)
