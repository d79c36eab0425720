"""The rollout test's availability reading (tests/vm/lab.py), without VMs: a host is down only on a poll that ran
and failed, never because its poller was not scheduled, and a poller that went quiet fails the check."""

from __future__ import annotations

import pytest

from tests.vm.lab import MAX_POLL_GAP, Poll, availability_per_second


def every_second(t0: float, t1: float, rc: int = 0, took: float = 0.2) -> list[Poll]:
    return [Poll(t, t + took, rc) for t in range(int(t0), int(t1))]


def test_a_starved_poller_keeps_its_host_last_observed_state():
    # spark-1's poller ran nothing between 10 and 16 (a loaded guest): its host stays up, as observed at 9.2
    polls = {"spark-1": every_second(0, 10) + every_second(16, 30),
             "spark-2": every_second(0, 30)}
    assert availability_per_second(polls, 2, 28) == [2] * 27


def test_a_failed_poll_counts_its_host_down_until_one_answers():
    polls = {"spark-1": every_second(0, 10) + every_second(10, 15, rc=7) + every_second(15, 30),
             "spark-2": every_second(0, 30)}
    counts = availability_per_second(polls, 2, 28)
    # the refused poll that started at 10 ended at 10.2: down from second 11 to 15; the answer at 15.2 is up at 16
    assert counts[:9] == [2] * 9 and counts[9:14] == [1] * 5 and counts[14:] == [2] * 13, counts


def test_a_timed_out_poll_counts_down():
    polls = {"spark-1": every_second(0, 10) + [Poll(10, 20, 28)] + every_second(21, 30)}
    counts = availability_per_second(polls, 2, 28)
    assert counts[18] == 0 and counts[17] == 1, counts


def test_a_poller_quiet_longer_than_the_bound_fails_the_check():
    polls = {"spark-1": every_second(0, 5) + every_second(5 + int(MAX_POLL_GAP) + 2, 60),
             "spark-2": every_second(0, 60)}
    with pytest.raises(AssertionError, match="spark-1: no poll finished"):
        availability_per_second(polls, 2, 58)
