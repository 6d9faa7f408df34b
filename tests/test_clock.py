"""The process clock (gpt1.pipeline.clock): where a stage process's time goes, from the OS's start of it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpt1.pipeline.clock import PHASE_PREFIX, PhaseClock, process_age


def fake_stat(root: Path, stat: str) -> Path:
    (root / "stat").write_text(stat)
    return root / "stat"


def test_the_age_is_the_time_since_boot_less_the_start_tick_after_a_name_with_spaces_and_parentheses(
        tmp_path: Path) -> None:
    ticks = os.sysconf("SC_CLK_TCK")
    # Fields 3..21 stand for themselves; field 22, the start time in ticks since boot, is 95 s after boot
    fields = " ".join(["S", *map(str, range(4, 22)), str(95 * ticks), "0", "0"])
    stat = fake_stat(tmp_path, f"4242 (python (x) y) {fields}\n")
    assert process_age(stat, now=lambda: 100.25) == pytest.approx(5.25)


@pytest.mark.parametrize("stat", ["4242 (python) S 1 2\n", "garbled"])
def test_the_age_is_none_where_proc_cannot_say(tmp_path: Path, stat: str) -> None:
    assert process_age(fake_stat(tmp_path, stat), now=lambda: 100.0) is None
    assert process_age(tmp_path / "absent", now=lambda: 100.0) is None


def test_this_process_is_as_old_as_the_os_says() -> None:
    """A child reports its own age right after its start: within the interpreter's start-up, never negative."""
    code = "from gpt1.pipeline.clock import process_age; print(process_age())"
    before = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    age = float(done.stdout)
    assert 0.0 <= age <= time.perf_counter() - before + 0.02  # /proc's 10 ms ticks


def test_laps_add_up_per_phase_and_the_process_spans_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    now = iter([100.0, 101.5, 104.0, 104.25, 110.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = PhaseClock(age=2.0)  # made at 100.0, the process started at 98.0
    for phase in ("start", "train", "evaluate", "train"):
        clock.lap(phase)
    assert clock.metrics() == {f"{PHASE_PREFIX}start_s": 3.5, f"{PHASE_PREFIX}train_s": 8.25,
                               f"{PHASE_PREFIX}evaluate_s": 0.25, f"{PHASE_PREFIX}process_s": 12.0}
    assert list(clock.metrics()) == [f"{PHASE_PREFIX}{p}_s" for p in ("start", "train", "evaluate", "process")]


def test_without_the_os_the_clock_starts_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    now = iter([50.0, 51.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = PhaseClock(age=None)
    clock.lap("load")
    assert clock.metrics() == {f"{PHASE_PREFIX}load_s": 1.0, f"{PHASE_PREFIX}process_s": 1.0}


def test_a_take_hands_the_phases_over_once(monkeypatch: pytest.MonkeyPatch) -> None:
    now = iter([0.0, 1.0, 3.0, 6.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = PhaseClock(age=0.0)
    clock.lap("load")
    clock.lap("train")
    assert clock.take() == ({f"{PHASE_PREFIX}load_s": 1.0, f"{PHASE_PREFIX}train_s": 2.0,
                             f"{PHASE_PREFIX}process_s": 3.0}, ["load", "train"])
    clock.lap("load")  # a second stage in the process: its phases alone, the process's whole span
    assert clock.take() == ({f"{PHASE_PREFIX}load_s": 3.0, f"{PHASE_PREFIX}process_s": 6.0}, ["load"])
