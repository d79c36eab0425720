"""Which vLLM an image carries, read from its reference (pure): the contract a `vllm_image`'s options are checked
against (engines/vllm_contract.py CONTRACTS) is that version's, and an image whose version specfleet cannot tell, or
has no contract for, is refused.

- NVIDIA's NGC images (`.../nvidia/vllm:YY.MM[.postN]-py3`, on nvcr.io or a registry that keeps the path) name their
  container release, not vLLM's version: the table below maps each release to the vLLM its release notes list.
- Any other image names its vLLM version at the start of its tag: upstream `vllm/vllm-openai:v0.20.1[-suffix]`, or a
  site's own build tagged `0.20.1-...`.
- A tag that names no version (`latest`, `nightly`, a digest alone) is refused: what it carries can change under the
  same name, and its options could not be checked.

Which optional modules an image carries is read from the same notes; where they say nothing, the image is taken not
to carry them (the stricter reading): suffix decoding needs arctic-inference (vllm_contract.SUFFIX_NEEDS)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .vllm_contract import CONTRACTS, Contract

NGC_NOTES = "https://docs.nvidia.com/deeplearning/frameworks/vllm-release-notes/rel-{}.html"


@dataclass(frozen=True)
class Carried:
    version: str  # the vLLM version
    source: str  # how that is known
    modules: tuple[str, ...] = ()  # optional modules it is known to carry


# NGC vLLM container release -> what it carries (NVIDIA's vLLM release notes, one page per release)
NGC_RELEASES: dict[str, Carried] = {
    "25.10": Carried("0.10.2", NGC_NOTES.format("25-10")),
    "26.01": Carried("0.11.1", NGC_NOTES.format("26-01")),
    "26.03": Carried("0.17.1", NGC_NOTES.format("26-03")),
    "26.05": Carried("0.20.1", NGC_NOTES.format("26-05")),
    # no notes are published for .post1: a re-spin of 26.05 is a GUESS (the playbook's single-Spark tag)
    "26.05.post1": Carried("0.20.1", "a GUESS: no release notes for 26.05.post1; taken as 26.05's vLLM"),
    "26.10": Carried("0.31.0", NGC_NOTES.format("26-10")),
}
_NGC_TAG = re.compile(r"([0-9]{2}\.[0-9]{2}(?:\.post[0-9]+)?)-py3")
_VERSION_TAG = re.compile(r"v?([0-9]+\.[0-9]+\.[0-9]+)(?![0-9])")


def _name_and_tag(image: str) -> tuple[str, str | None]:
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        return f"{head}/{last}" if head else last, tag
    return name, None


def carried(image: str) -> Carried | None:
    """What vLLM the image reference names (None: it names none that specfleet can read)."""
    name, tag = _name_and_tag(image)
    if tag is None:
        return None
    ngc = _NGC_TAG.fullmatch(tag)
    if ngc and (name == "nvidia/vllm" or name.endswith("/nvidia/vllm")):
        return NGC_RELEASES.get(ngc.group(1))
    version = _VERSION_TAG.match(tag)
    return Carried(version.group(1), f"its tag {tag}") if version else None


def image_problem(image: str) -> str | None:
    """Why specfleet cannot check options for `image` (None: it can, with contract_of(image))."""
    found = carried(image)
    known = ", ".join(sorted(CONTRACTS))
    examples = "nvcr.io/nvidia/vllm:26.05.post1-py3, vllm/vllm-openai:v0.20.1"
    if found is None:
        name, tag = _name_and_tag(image)
        ngc = tag is not None and _NGC_TAG.fullmatch(tag) and name.endswith("nvidia/vllm")
        what = (f"is an NGC vLLM release ({tag}) whose vLLM version specfleet does not know" if ngc
                else "names no vLLM version in its tag")
        return f"{image!r} {what} (allowed: an image of a vLLM version specfleet has a contract for: {known}, e.g. " \
               f"{examples})"
    if found.version not in CONTRACTS:
        return (f"{image!r} carries vLLM {found.version} ({found.source}), which specfleet has no contract for "
                f"(allowed: vLLM {known}, e.g. {examples})")
    return None


def contract_of(image: str) -> Contract:
    """The contract of the vLLM the image carries (image_problem(image) is None)."""
    found = carried(image)
    assert found is not None and found.version in CONTRACTS, image
    return CONTRACTS[found.version]


def carries(image: str, module: str) -> bool:
    """Whether the image is known to carry an optional module (unknown: no, the stricter reading)."""
    found = carried(image)
    return found is not None and module in found.modules
