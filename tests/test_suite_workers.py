"""bench/suite_workers.py: the order its runs take and what it reads from pytest's output (the runs themselves are
the whole suite, tens of minutes each: a benchmark, not a test)."""

from __future__ import annotations

import pytest

from bench.suite_workers import parse_summary, plan


def test_the_arms_alternate_and_swap_their_order_every_round() -> None:
    assert plan([3, 2], 3) == [(0, 3), (0, 2), (1, 2), (1, 3), (2, 3), (2, 2)]


def test_pytests_last_line_gives_the_seconds_and_the_outcome() -> None:
    output = ("....\nSKIPPED [1] tests/test_slurm.py:130: set GPT1_SLURM_TEST=1\n"
              "783 passed, 5 skipped in 1552.61s (0:25:52)\n")
    assert parse_summary(output) == (1552.61, "783 passed, 5 skipped")
    failed = "==== 2 failed, 781 passed, 5 skipped in 1601.20s (0:26:41) ====\n"
    assert parse_summary(failed) == (1601.2, "2 failed, 781 passed, 5 skipped")


def test_an_output_without_a_summary_is_an_error_quoting_its_end() -> None:
    with pytest.raises(ValueError, match="no pytest summary line in the run's output: 'Traceback"):
        parse_summary("Traceback (most recent call last):\n  ImportError: no module\n")
