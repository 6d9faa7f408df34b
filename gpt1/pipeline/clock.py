"""Where a stage process's time goes: seconds between named marks, from the moment the OS started the process (the
interpreter's start-up and the imports included) to the last mark. The CLI marks `start` (its own imports done) and
`setup` (config, threads, numerics, checks); a stage marks its phases and logs them to its MLflow run as
time.<phase>_s (`tracking.StageRun.log_times`). Records hold no timings, so this changes no output's bytes. What
follows the last mark, the run's end and the process's exit, is a job's wall (Snakemake's) less time.process_s."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

PROC = Path("/proc")
PHASE_PREFIX = "time."  # an MLflow metric time.<phase>_s
PHASES_TAG = "gpt1.phases"  # the run's phases in their order (MLflow keeps no order of metrics)


def boot_seconds() -> float:
    """Seconds since the system booted, on the clock the kernel stamps a process's start with."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_age(stat: Path = PROC / "self" / "stat", now: Callable[[], float] = boot_seconds) -> float | None:
    """Seconds since the OS started this process: the time since boot less the process's start tick, field 22 of
    /proc/self/stat (Linux; 10 ms ticks); None where it cannot say."""
    try:
        # counted after the command name's ')': a name may hold spaces and parentheses
        start_ticks = int(stat.read_text().rsplit(")", 1)[1].split()[19])
        return max(0.0, now() - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):  # AttributeError: no CLOCK_BOOTTIME (not Linux)
        return None


class PhaseClock:
    """Seconds per phase: `lap(phase)` adds the time since the previous mark to `phase` (a phase marked twice, a job
    repeated in one process, adds up). Starts at the process's start where the OS says it, else when made."""

    def __init__(self, age: float | None = None) -> None:
        self.first = time.perf_counter() - (age or 0.0)
        self.last = self.first
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self.last
        self.last = now

    def metrics(self) -> dict[str, float]:
        """time.<phase>_s for every phase in the order first marked, and time.process_s: the start to the last mark."""
        return {**{f"{PHASE_PREFIX}{phase}_s": round(seconds, 3) for phase, seconds in self.phases.items()},
                f"{PHASE_PREFIX}process_s": round(self.last - self.first, 3)}

    def take(self) -> tuple[dict[str, float], list[str]]:
        """`metrics()` and the phases in their order, then none: a second stage in the same process (a test, a
        notebook) logs its own phases, the first of them holding the time since this take."""
        taken = self.metrics(), list(self.phases)
        self.phases.clear()
        return taken


# The process's clock: the CLI and the stage it runs mark it.
PROCESS = PhaseClock(process_age())

__all__ = ["PHASES_TAG", "PHASE_PREFIX", "PROCESS", "PhaseClock", "boot_seconds", "process_age"]
