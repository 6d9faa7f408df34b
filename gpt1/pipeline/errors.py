"""The one base class of errors caused by input (config, data, files, arguments): the CLI prints their single
line, which names the key, file, row or field and the fix, instead of a traceback."""

from __future__ import annotations

from collections.abc import Iterator


class Gpt1Error(ValueError):
    pass


def causes(err: BaseException) -> Iterator[BaseException]:
    """`err`, then what it was raised from or during, and so on: a library's error wrapped in another's."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:  # a chain can loop back on itself
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def interruption(err: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or signal (cli.boundary.Killed) that stopped a stage, even where what it set off raised another
    error on the way out: SIGTERM to a job's process group also ends the `tee` the stage writes to, and the next
    progress line then raises BrokenPipeError."""
    return next((e for e in causes(err) if isinstance(e, KeyboardInterrupt)), None)


class ReportError(Gpt1Error):
    """A malformed input of the report: names the file and the key (or row and column), and what was expected."""


class FinetuneError(Gpt1Error):
    """Bad fine-tuning input: names the file, key or argument, and what would be valid."""


class ScoringError(Gpt1Error):
    """A scoring request that cannot be met (no room in the context, an unknown reduction)."""


class SyntheticDataError(Gpt1Error):
    pass


class TokenizerError(Gpt1Error):
    pass


class IdsError(Gpt1Error):
    pass


class ConfigError(Gpt1Error):
    """A one-line message naming the key and what would be valid."""


class UsageError(Gpt1Error):
    """A command-line argument that argparse cannot check (its valid values live beside the code that uses them):
    exits 2, as argparse's own errors do."""


class CodeDepsError(Exception):
    """The CLI does not declare the command asked for (a typo in a rule, or a command renamed)."""


class MetricError(Gpt1Error):
    pass


class PretrainError(Gpt1Error):
    pass


class SourceError(Gpt1Error):
    """A dataset, split or column that is missing, naming what and where it looked."""


class PredictionsError(Gpt1Error):
    """A malformed predictions.jsonl: named by file, line and key."""


class ResumeError(Gpt1Error):
    pass


class TaskDataError(Gpt1Error):
    """Bad task-data input: names the task, setting or file, and the fix."""


class TrackingError(Gpt1Error):
    """The MLflow store cannot be used: one line naming it and what to do."""


class ZeroshotError(Gpt1Error):
    pass


class CheckpointError(Gpt1Error):
    pass


class TaskError(Gpt1Error):
    """Bad task input: names the task, split, row and field, and what would be valid."""


class CompareError(Gpt1Error):
    """A results tree that cannot be compared: missing, empty, or with unreadable records."""


class RecordError(Gpt1Error):
    """A record file that is not what its declaration says."""


class NumericsError(Gpt1Error):
    """The process cannot be pinned (torch loaded first) or a run's numerics record is unreadable."""


class PinnedKernelError(Gpt1Error):
    """A matrix product the pinned mode has no vendor-independent kernel for."""
