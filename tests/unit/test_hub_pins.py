"""Controller-side pinning against the Hub stand-in (real huggingface_hub client, no VM)."""

import pytest

from specfleet.pins.models import resolve_pins
from tests.unit.fakehost import make_plans
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin


@pytest.fixture(scope="module")
def hub():
    with HubStandin() as server:
        yield server


def _settings(hub, monkeypatch, token=STANDIN_TOKEN, **vars):
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    else:
        monkeypatch.delenv("HF_TOKEN", raising=False)
    return vars | {"hub_endpoint": hub.url, "hf_token_required": bool(token)}


def test_pins_commit_files_and_skips_gpt_oss_copies(hub, monkeypatch):
    plans = make_plans({"s1": _settings(hub, monkeypatch), "s2": _settings(hub, monkeypatch)}, "eagle3")
    pins, problems = resolve_pins({h: p.settings for h, p in plans.items()})
    assert problems == []
    target = pins["s1"]["target"]
    assert target.commit == HubStandin.commit("openai/gpt-oss-120b")
    names = [n for n, _ in target.files]
    assert "model-00000-of-00002.safetensors" in names
    assert not [n for n in names if n.startswith(("original/", "metal/"))]
    assert target.size < target.repo_bytes / 2
    assert pins["s2"]["draft"].commit == HubStandin.commit("nvidia/gpt-oss-120b-Eagle3-long-context")


def test_older_draft_revision_pins_that_commit(hub, monkeypatch):
    old = HubStandin.commits("nvidia/gpt-oss-120b-Eagle3-long-context")[0]
    plans = make_plans({"s1": _settings(hub, monkeypatch, draft_revision=old)}, "eagle3")
    pins, problems = resolve_pins({h: p.settings for h, p in plans.items()})
    assert not problems and pins["s1"]["draft"].commit == old


def test_gated_repo_without_access_names_the_page(hub, monkeypatch):
    plans = make_plans({"s1": _settings(hub, monkeypatch, token="hf_wrong")}, "draft_target")
    _, problems = resolve_pins({h: p.settings for h, p in plans.items()})
    assert [str(p) for p in problems] == [
        f"s1: hf_token: nvidia/Llama-3.3-70B-Instruct-FP4 is gated and this token has no access; request access at "
        f"{hub.url}/nvidia/Llama-3.3-70B-Instruct-FP4 (or set hf_token_file)"]


def test_unknown_revision_and_unreachable_hub(hub, monkeypatch):
    plans = make_plans({"s1": _settings(hub, monkeypatch, target_revision="v9.9")}, "eagle3")
    _, problems = resolve_pins({h: p.settings for h, p in plans.items()})
    assert [p.key for p in problems] == ["target_revision"]
    plans = make_plans({"s1": _settings(hub, monkeypatch, controller_hub_endpoint="http://127.0.0.1:9")}, "eagle3")
    _, problems = resolve_pins({h: p.settings for h, p in plans.items()})
    assert problems and {p.key for p in problems} == {"controller_hub_endpoint"}
    assert "cannot reach http://127.0.0.1:9" in problems[0].message
