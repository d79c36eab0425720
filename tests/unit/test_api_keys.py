"""The gateway's API keys read on the controller: every bad line is one problem naming its line, never the key."""

from __future__ import annotations

import pytest

from specfleet.gateway.keys import ENV_VAR, parse_keys, read_keys

GOOD = "sk-0123456789abcdef"
OTHER = "sk-fedcba9876543210"


def test_a_keys_file_with_comments_and_blank_lines(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# team keys\n\nalice {GOOD}\n  bob\t{OTHER}  \n")
    assert read_keys(str(path)) == ({"alice": GOOD, "bob": OTHER}, [])


@pytest.mark.parametrize("text,expect", [
    (f"alice {GOOD}\nalice {OTHER}\n", "keys line 2: the name alice is used twice"),
    (f"alice {GOOD}\nbob {GOOD}\n", "keys line 2: the same key as line 1"),
    ("alice sk-short\n", "keys line 1 is not a valid key line"),
    (f"alice {GOOD} extra\n", "keys line 1 is not a valid key line"),
    (f"al ice {GOOD}\n", "keys line 1 is not a valid key line"),
    (f"alice;rm {GOOD}\n", "keys line 1 is not a valid key line"),
    (f"alice {GOOD}\u00e9\n", "keys line 1 is not a valid key line"),
    ("# nothing\n", "keys holds no key"),
])
def test_every_bad_line_is_one_problem_without_the_key(text, expect):
    keys, problems = parse_keys(text, "keys")
    assert len(problems) == 1 and problems[0].startswith(expect), problems
    assert GOOD not in problems[0] and OTHER not in problems[0] and "sk-short" not in problems[0]


def test_the_environment_is_read_when_no_file_is_set(monkeypatch):
    monkeypatch.setenv(ENV_VAR, f"ci {GOOD}")
    assert read_keys(None) == ({"ci": GOOD}, [])
    monkeypatch.delenv(ENV_VAR)
    keys, problems = read_keys(None)
    assert keys == {} and "set gateway_api_keys_file or export SPECFLEET_API_KEYS" in problems[0]


def test_an_unreadable_or_binary_file_is_one_line(tmp_path):
    assert read_keys(str(tmp_path / "missing"))[1] == [f"cannot read {tmp_path / 'missing'}: No such file or directory"]
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe")
    assert read_keys(str(binary))[1] == [f"{binary} is not UTF-8 text"]
