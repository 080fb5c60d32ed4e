"""Where output goes: protocol messages to the real stdout, everything human to stderr."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from contextlib import contextmanager
from datetime import datetime, UTC
from typing import Any, NoReturn
from collections.abc import Callable, Iterator

from olake_cli.core import messages
from olake_cli.core.errors import OlakeError
from olake_cli.core.interrupts import signals_caught

_WRITER: messages.MessageWriter | None = None
EXIT_TRANSIENT = 75  # sysexits.h EX_TEMPFAIL: the same command may work later, as it is
EXIT_CONFIG = 78  # sysexits.h EX_CONFIG: a config, catalog, state, grant or server setting needs a fix first
LOG_FORMATS = ("text", "json")
_LOG_FORMAT = "text"


def set_log_format(name: str) -> None:
    """Choose how :func:`log` writes: ``text`` (``olake: ...`` lines) or ``json`` (one object a line)."""
    global _LOG_FORMAT
    if name not in LOG_FORMATS:
        raise ValueError(f"unknown log format {name!r}")
    _LOG_FORMAT = name


def log_format() -> str:
    """The log format in use."""
    return _LOG_FORMAT


def log(text: str, level: str = "info", **fields: Any) -> None:
    """One line on stderr: ``olake: text`` (errors ``olake: error: text``), or with ``--log-format json``
    a JSON object with ``time``, ``level`` (info, warn, error), ``message`` and ``fields``."""
    if _LOG_FORMAT == "json":
        entry = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": level,
                 "message": text, **fields}
        line = messages.dumps(entry).decode()
    else:
        line = f"olake: error: {text}\n" if level == "error" else f"olake: {text}\n"
    sys.stderr.write(line)
    sys.stderr.flush()


def protocol_writer() -> messages.MessageWriter:
    """The writer for protocol messages on the process's real stdout.

    File descriptor 1 is then pointed at stderr, so anything else that prints (the JVM, Spark's
    Python workers, a stray library) cannot corrupt the protocol stream.
    """
    global _WRITER
    if _WRITER is None:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        _WRITER = messages.MessageWriter(os.fdopen(saved, "wb", buffering=1 << 20))
    return _WRITER


@contextmanager
def command_guard(shutdown: Callable[[], None] = lambda: None, following: bool = False,
                  feeds_writer: bool = False) -> Iterator[None]:
    """Run a long command: a closed stdout ends it quietly (see :func:`stdout_closed`), or, for a run
    that follows its change log into a writer (``feeds_writer``), as a failure (:func:`follower_lost_stdout`);
    an interrupt ends it with one line and status 128 + the signal number (see :func:`interrupted`), or,
    for a run that follows its change log, also during its loads, as a stop (:func:`stopped`)."""
    try:
        yield
    except BrokenPipeError:
        if following and feeds_writer:
            follower_lost_stdout()
        stdout_closed()
    except KeyboardInterrupt as exc:
        ended_by_signal(getattr(exc, "signum", signal.SIGINT), following, shutdown)


def ended_by_signal(signum: int, following: bool, shutdown: Callable[[], None] = lambda: None) -> NoReturn:
    """A signal ended the command: for a run that follows its change log, the first one is a stop at any
    moment (start-up and loads included): one line, status 0 for SIGTERM and 130 for SIGINT; otherwise, or
    for a second signal, an interrupt (:func:`interrupted`)."""
    if following and signals_caught() <= 1:
        _ignore_signals()
        try:
            shutdown()
        finally:
            stopped(signum)
            try:
                protocol_writer().flush()
            except (BrokenPipeError, OSError):
                pass
            os._exit(130 if signum == signal.SIGINT else 0)
    interrupted(signum, shutdown)


def follows_by_argv() -> bool:
    """Whether the command line asks to follow the change log (for a signal before its options are parsed)."""
    return "--follow" in sys.argv[1:]


def stopped(signum: int) -> None:
    """The line of a following run that a signal stopped (it exits 0 for SIGTERM, 130 for SIGINT): what it
    committed is kept, and the same command resumes from there."""
    log(f"stopped by {signal.Signals(signum).name}; what was committed is kept (a load resumes from its "
        f"committed chunks), and running the same command again resumes from there")


def interrupted(signum: int, shutdown: Callable[[], None] = lambda: None) -> NoReturn:
    """One line and a TRACE for an interrupted run, after ``shutdown`` (which must not print), then
    exit at once with status 128 + ``signum``.

    By now every ``with`` block has unwound (locks released, commits finished or never begun); what
    the interpreter would still do on a normal exit (join threads waiting on cancelled Spark jobs,
    free every module) took seconds, and nothing of it matters to the run, so it is skipped.
    """
    _ignore_signals()
    try:
        shutdown()
    except Exception:  # the run is over either way; the line below says what matters
        pass
    name = signal.Signals(signum).name
    text = (f"interrupted by {name}; everything acknowledged before it is committed and saved, "
            f"so running the same command again resumes from there")
    try:
        writer = protocol_writer()
        writer.write(messages.trace_error(text, "transient_error"))
        writer.flush()
    except (BrokenPipeError, OSError):
        pass
    log(text, "warn")
    os._exit(128 + signum)


def _ignore_signals() -> None:
    """A process ending reports one ending: a later SIGINT or SIGTERM must not interrupt it with another."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def stdout_closed() -> NoReturn:
    """The reader of stdout went away (``olake read ... | head``): end quietly, exit status 0.

    Further output, including what is still buffered, goes to /dev/null, so nothing complains at exit.
    """
    _stdout_to_devnull()
    sys.exit(0)


def follower_lost_stdout() -> NoReturn:
    """The reader of a following run's stdout went away (``olake write`` ended or was killed): what the run
    reads next can never be committed, so it stops with one line and status 1, for a service manager to
    start the pipe again (the change log was let go only up to what the writer committed)."""
    _stdout_to_devnull()
    log("the reading side of stdout closed (the writer ended); --follow stops here: what it committed is kept, "
        "and running the pipe again resumes from there", "error")
    sys.exit(1)


def _stdout_to_devnull() -> None:
    """Send further output, including what is still buffered, to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    if _WRITER is not None:
        os.dup2(devnull, _WRITER.fileno())
    os.dup2(devnull, 1)


def exit_status(error: OlakeError) -> int:
    """The exit status of a run that ``error`` ends, by its ``failure_type``: EXIT_CONFIG for a
    ``config_error``, EXIT_TRANSIENT for a ``transient_error``, 1 for anything else."""
    return {"config_error": EXIT_CONFIG, "transient_error": EXIT_TRANSIENT}.get(error.failure_type, 1)


def fail(error: OlakeError, exit_code: int | None = None) -> NoReturn:
    """Report an error as a TRACE on stdout and one line on stderr, then exit non-zero (``exit_code``, or
    the error's :func:`exit_status`)."""
    _ignore_signals()
    stack = error.stack_trace
    if stack is None and error.failure_type == "system_error" and error.__traceback__ is not None:
        stack = "".join(traceback.format_exception(error))
    try:
        writer = protocol_writer()
        writer.write(messages.trace_error(error.message, error.failure_type, error.internal_message, stack))
        writer.flush()
    except (BrokenPipeError, OSError):
        pass
    details = {} if error.internal_message is None else {"internal_message": error.internal_message}
    log(error.message, "error", failure_type=error.failure_type, **details)
    sys.exit(exit_status(error) if exit_code is None else exit_code)
