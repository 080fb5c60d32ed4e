"""Where output goes: protocol messages to the real stdout, everything human to stderr."""

from __future__ import annotations

import os
import sys
import traceback
from contextlib import contextmanager
from typing import Iterator, NoReturn

from olake_cli.core import messages
from olake_cli.core.errors import OlakeError

_WRITER: messages.MessageWriter | None = None


def log(text: str) -> None:
    """One human line on stderr."""
    sys.stderr.write(f"olake: {text}\n")
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
def quiet_when_stdout_closes() -> Iterator[None]:
    """Run a command; if the reader of stdout goes away, end quietly (see :func:`stdout_closed`)."""
    try:
        yield
    except BrokenPipeError:
        stdout_closed()


def stdout_closed() -> NoReturn:
    """The reader of stdout went away (``olake read ... | head``): end quietly, exit status 0.

    Further output, including what is still buffered, goes to /dev/null, so nothing complains at exit.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    if _WRITER is not None:
        os.dup2(devnull, _WRITER.fileno())
    os.dup2(devnull, 1)
    sys.exit(0)


def fail(error: OlakeError, exit_code: int = 1) -> NoReturn:
    """Report an error as a TRACE on stdout and one line on stderr, then exit non-zero."""
    stack = None
    if error.failure_type == "system_error" and error.__traceback__ is not None:
        stack = "".join(traceback.format_exception(error))
    try:
        writer = protocol_writer()
        writer.write(messages.trace_error(error.message, error.failure_type, stack_trace=stack))
        writer.flush()
    except (BrokenPipeError, OSError):
        pass
    log(f"error: {error.message}")
    sys.exit(exit_code)
