"""Rollout arithmetic: batch ramps, --max-fail semantics, --limit selection."""

import pytest

from specfleet.fleet.selection import parse_batches, parse_max_fail, select


@pytest.mark.parametrize("spec,n,expected", [
    ("1,25%", 3, [1, 1, 1]),          # default: canary, then 25% (at least one host) repeated
    ("1,25%", 10, [1, 2, 2, 2, 2, 1]),
    ("1,25%,100%", 10, [1, 2, 7]),     # Ansible's ramp
    ("2", 5, [2, 2, 1]),
    ("100%", 4, [4]),
    ("1,3", 10, [1, 3, 3, 3]),
    ("5", 2, [2]),
])
def test_batches(spec, n, expected):
    assert parse_batches(spec, n) == expected
    assert sum(parse_batches(spec, n)) == n


@pytest.mark.parametrize("spec", ["", "0", "-1", "0%", "150%", "x", "1,,a"])
def test_bad_batches(spec):
    with pytest.raises(ValueError):
        parse_batches(spec, 3)


@pytest.mark.parametrize("spec,n,tolerated", [("0", 10, 0), ("1", 10, 1), ("25%", 10, 2), ("50%", 3, 1), ("0%", 5, 0)])
def test_max_fail(spec, n, tolerated):
    assert parse_max_fail(spec, n) == tolerated


def test_max_fail_must_be_exceeded():
    """The rollout halts when failures > tolerated: with --max-fail 1, one failure continues, two halt."""
    tolerated = parse_max_fail("1", 10)
    assert not (tolerated < 1) and (tolerated < 2)


@pytest.mark.parametrize("spec", ["-1", "abc", "101%"])
def test_bad_max_fail(spec):
    with pytest.raises(ValueError):
        parse_max_fail(spec, 3)


def test_limit_by_host_group_and_glob_keeps_inventory_order():
    hosts = ["s3", "s1", "s2", "x1"]
    groups = {"all": hosts, "lab": ["s1", "s2"], "canary": ["s3"]}
    assert select(hosts, groups, None) == hosts
    assert select(hosts, groups, "lab") == ["s1", "s2"]
    assert select(hosts, groups, "s2,canary") == ["s3", "s2"]
    assert select(hosts, groups, "s*") == ["s3", "s1", "s2"]
    assert select(hosts, groups, "nope") == []
