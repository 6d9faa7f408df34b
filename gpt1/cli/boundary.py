"""The CLI's edge: a failure a user can cause (bad input, a full disk, a broken MLflow store, a kill) becomes one
line on stderr naming the file or setting and the fix, with a non-zero exit code; GPT1_DEBUG=1 adds the traceback.
An exception no input explains (a bug in gpt1) keeps its traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import signal
import sys
import threading
import traceback
from argparse import Namespace
from collections.abc import Iterator
from types import FrameType

from gpt1.pipeline.errors import Gpt1Error, causes, interruption

DEBUG_ENV = "GPT1_DEBUG"
EXIT_INPUT = 1
EXIT_CONFIG = 2  # a setting or an argument, as argparse exits
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_READER_GONE = 128 + signal.SIGPIPE  # as a shell reports a command whose reader left (`gpt1 config | head -1`)
# What to do about an OSError, by errno; the line names the file before it.
ERRNO_FIXES = {
    errno.ENOSPC: "the disk is full; free some space (or choose another --out) and rerun",
    errno.EDQUOT: "the disk quota is used up; free some space (or choose another --out) and rerun",
    errno.EACCES: "fix the permissions, or choose another path",
    errno.EPERM: "fix the permissions (or the file's attributes), or choose another path",
    errno.EROFS: "the file system is read-only; choose another --out",
    errno.ENOTDIR: "a part of the path is a file, not a folder; choose another path",
    errno.EISDIR: "a folder is where a file should be; move it away or choose another path",
    errno.ENOENT: "check the path",
    errno.EEXIST: "something that is not a folder is in the way; move it or choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.EIO: "the disk or network file system failed; check it and rerun",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n) and rerun",
}
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how tokenizers and safetensors report an OSError
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)  # a failed write() or close() names no file


class Killed(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) turned into an exception, so that every `finally` and `except BaseException` runs: temp
    files are removed and the MLflow run is marked KILLED."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_killed(signum: int, frame: FrameType | None) -> None:
    raise Killed(signum)


@contextlib.contextmanager
def killable() -> Iterator[None]:
    """Within the block SIGTERM and SIGHUP raise Killed; the previous handlers come back after it. (Only the main
    thread may set handlers: called from another, the block runs as it is.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_killed) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def debug() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _outputs(args: Namespace) -> str:
    out = getattr(args, "out", None)
    return f" to {out}" if out is not None else ""


def _inputs(args: Namespace) -> str:
    """The stage's input folders, for a line that cannot name the one file."""
    from gpt1.cli.preflight import INPUT_FOLDERS

    named = [f"--{a.replace('_', '-')} {getattr(args, a)}" for a in INPUT_FOLDERS if getattr(args, a, None)]
    return f" (inputs: {', '.join(named)})" if named else ""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def os_error_line(err: OSError, args: Namespace) -> str:
    """'FILE: what happened; the fix'. A failed write() names no file: then the stage's output folder."""
    fix = ERRNO_FIXES.get(err.errno, "check the path and rerun")
    what = err.strerror or _first_line(err)
    if err.filename is not None:
        where = f"{err.filename} -> {err.filename2}" if err.filename2 is not None else str(err.filename)
        return f"{where}: {what}; {fix}"
    if err.errno in WRITE_ERRNOS:
        return f"{what} while writing{_outputs(args)}; {fix}"
    return f"{what}{_inputs(args)}; {fix}"  # e.g. a network error of a download


def _rust_os_error(err: BaseException) -> OSError | None:
    """tokenizers and safetensors raise plain exceptions that end in '(os error 28)'."""
    match = RUST_OS_ERROR.search(str(err))
    if match is None:
        return None
    number = int(match.group(1))
    return OSError(number, os.strerror(number))


def _arrow_error(err: BaseException) -> BaseException | None:
    """A parquet/Arrow error, also when datasets wrapped it in its own."""
    for inner in causes(err):
        if type(inner).__module__.startswith("pyarrow"):
            return inner
    return None


def _store_error(err: BaseException) -> Gpt1Error | None:
    """MLflow's and SQLAlchemy's errors (gpt1 uses SQLAlchemy through MLflow only); requests' could be a download's."""
    if "mlflow" not in sys.modules:
        return None  # no store was opened
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    from gpt1.pipeline.mlflow_store import store_error

    return store_error(err) if isinstance(err, MlflowException | sqlalchemy.exc.SQLAlchemyError) else None


def library_error_line(err: BaseException, args: Namespace) -> str | None:
    """A line for the libraries' errors gpt1 did not convert where it knew the file, or None (a bug)."""
    if isinstance(err, OSError):
        return os_error_line(err, args)
    if (os_err := _rust_os_error(err)) is not None:
        return os_error_line(os_err, args)
    if isinstance(err, pickle.UnpicklingError):
        return (f"refused to unpickle a file{_inputs(args)}: {_first_line(err)[:120]}; gpt1 reads only plain "
                f"tensors and safetensors, never code: replace the file with one a gpt1 stage wrote")
    arrow = _arrow_error(err)
    if arrow is not None:
        return f"a parquet file could not be read ({_first_line(arrow)}); check the data mirror or re-download it"
    if isinstance(err, json.JSONDecodeError | UnicodeDecodeError) or type(err) is Exception:
        # Exception itself: what tokenizers raises; gpt1 never raises it.
        return f"{_first_line(err)}{_inputs(args)}; re-run the stage that wrote the input ({DEBUG_ENV}=1 shows where)"
    return None


def failure_line(err: BaseException, args: Namespace) -> tuple[str, int] | None:
    """(line, exit code) for a failure a user can cause, or None to let the traceback show."""
    from gpt1.cli.preflight import diagnose_inputs
    from gpt1.pipeline.errors import ConfigError, UsageError

    stage = f"gpt1 {args.command}"
    err = interruption(err) or err  # a stop, whatever it set off on the way out
    if isinstance(err, Killed):
        return f"{stage}: stopped by {err}; no half-written output was left, rerun to redo or resume", 128 + err.signum
    if isinstance(err, KeyboardInterrupt):
        return f"{stage}: interrupted; no half-written output was left, rerun to redo or resume", EXIT_INTERRUPTED
    if isinstance(err, ConfigError):
        return f"gpt1: config error: {err}", EXIT_CONFIG
    if isinstance(err, UsageError):
        return f"{stage}: error: {err} (see {stage} --help)", EXIT_CONFIG
    if isinstance(err, Gpt1Error):
        return f"{stage}: error: {err}", EXIT_INPUT
    if not isinstance(err, Exception):
        return None
    if isinstance(err, OSError) and err.filename is not None:
        return f"{stage}: error: {os_error_line(err, args)}", EXIT_INPUT  # it names its file
    store = _store_error(err)
    if store is not None:
        return f"{stage}: error: {store}", EXIT_INPUT
    # A bad input file is the likeliest cause of an error that names none: look before blaming the library.
    line = diagnose_inputs(args) or library_error_line(err, args)
    return (f"{stage}: error: {line}", EXIT_INPUT) if line else None


def report(err: BaseException, args: Namespace) -> int:
    """Print the one line (after the traceback under GPT1_DEBUG=1) and return the exit code; re-raise a bug."""
    if isinstance(err, BrokenPipeError) and interruption(err) is None:
        # The reader of stdout left: nothing to say, and nobody to say it to. Python's exit flushes stdout again, so
        # it goes to /dev/null first (the recipe of Python's signal docs).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE
    found = failure_line(err, args)
    if found is None:
        raise err
    line, code = found
    if debug():
        traceback.print_exception(err)
    print(" ".join(line.split("\n")), file=sys.stderr)
    return code
