"""The one status read is composed of the parts the features register (facts.register): a feature adds its fragment of
the remote command, its variables, its parser and its files without editing the composer or any other feature, and a
host is still read with one remote command."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

import pytest
from pyinfra import host
from pyinfra.api import deploy

from specfleet.fleet import status as facts
from specfleet.fleet.status import FileReads, Lines, SpecfleetHost, StatusPart, Want
from specfleet.fleet.steps.state import SPARK_PARTS, current_plan, host_status, wanted_files
from tests.unit.fakehost import SPECFLEET_FACT, converged_responses, executed, make_plans, run_deploy, status_command


@dataclass
class Toy:
    greeting: str = ""
    count: int = 0


def _parse_toy(lines: Lines) -> Toy:
    toy = Toy()
    for key, rest in lines:
        if key == "toy_greeting":
            toy.greeting = rest
        elif key == "toy_count":
            toy.count = int(rest)
    return toy


TOY_DIR = "/var/lib/toy"
# A fragment that needs its variable and the shell: the value comes back only if the host ran it
TOY = StatusPart("toy", frozenset({"toy_greeting", "toy_count"}), _parse_toy,
                 script='echo "toy_greeting\thello $TOY_NAME"\necho "toy_count\t$((20 + 22))"\n',
                 env=lambda plan: {"TOY_NAME": plan.settings.host},
                 reads=lambda plan: FileReads(files=(f"{TOY_DIR}/left-over",)),
                 wanted=lambda plan: {TOY_DIR: Want("dir")})


@pytest.fixture
def toy():
    facts.register(TOY)
    try:
        yield TOY
    finally:
        facts.unregister(TOY)


def _toy_answers(plan):
    """A converged host that runs the toy fragment: it answers the toy's lines only to a command that carries the
    fragment and the toy's variable, and answers nothing else to any other status read."""
    out = converged_responses(plan)
    lines = out.pop(SPECFLEET_FACT)
    shipped = re.compile(r"^(?=.*TOY_NAME=spark-01 )(?=.*echo \"toy_count).*" + SPECFLEET_FACT.pattern, re.S)
    return {**out, shipped: [*lines, "toy_greeting\thello spark-01", "toy_count\t42"]}


@deploy("Read the toy part")
def _read_toy(seen: dict):
    seen[host.name] = host_status(current_plan()).toy


def test_a_registered_part_comes_back_from_the_one_read_of_a_host(toy):
    plans = make_plans({"spark-01": {}}, "eagle3")
    seen: dict = {}
    state = run_deploy(plans, _read_toy, seen, responses=_toy_answers)
    assert not state.failed_hosts
    assert seen == {"@fake/spark-01": Toy("hello spark-01", 42)}
    reads = [c for c in executed(state)["spark-01"] if SPECFLEET_FACT.search(c)]
    assert len(reads) == 1, reads  # one remote command, the toy's fragment in it


def test_a_registered_part_asks_the_file_checks_and_adds_wanted_files(toy):
    plan = make_plans({"spark-01": {}}, "eagle3")["spark-01"]
    assert wanted_files(plan)[TOY_DIR] == Want("dir")
    env = dict(facts.status_env(plan, wanted_files(plan)))
    files = env["FILES"].split("\n")
    assert env["TOY_NAME"] == "spark-01" and TOY_DIR in files and f"{TOY_DIR}/left-over" in files
    assert plan.paths.data_dir in files  # the other parts' files are still asked for


def test_a_registered_part_runs_in_the_real_shell(toy, tmp_path):
    out = subprocess.run(["sh", "-c", status_command(str(tmp_path), TOY_NAME="there")], capture_output=True,
                         text=True, timeout=60).stdout
    st = SpecfleetHost().process(out.splitlines())
    assert st.part(TOY) == Toy("hello there", 42) and st.toy is st.part(TOY)
    assert st.release.current == "" and not st.release.release_state_error  # the other parts read as before


def test_without_the_part_its_lines_are_ignored_and_it_is_not_read():
    assert "toy" not in [p.name for p in facts.parts()]
    st = SpecfleetHost().process(["toy_count\t42", "arch\taarch64"])
    assert st.platform.arch == "aarch64" and not hasattr(st, "toy")


def test_a_part_cannot_take_another_parts_name_key_or_variable(toy):
    with pytest.raises(ValueError, match="taken"):
        facts.register(StatusPart("toy"))
    with pytest.raises(ValueError, match="taken"):
        facts.register(StatusPart("other", frozenset({"arch"})))
    clash = StatusPart("clash", env=lambda plan: {"IMAGE": "x"})
    facts.register(clash)
    try:
        with pytest.raises(ValueError, match="IMAGE is taken"):
            facts.status_env(make_plans({"spark-01": {}}, "eagle3")["spark-01"], ())
    finally:
        facts.unregister(clash)


def test_a_sparks_read_is_the_features_parts_and_the_file_checks():
    assert {p.name for p in facts.parts()} == {p.name for p in SPARK_PARTS} | {"files"}
