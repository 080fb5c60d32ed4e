"""SIGINT and SIGTERM as an exception in the main thread, held back while a commit runs (or, for a
run that follows its change log, as a stop request it honours at its next checkpoint).

Ctrl-C at a terminal reaches every process of the pipeline at once (``read`` and ``write``); each
stops through its normal cleanup, except that a commit under way (destination, ``--state`` file,
the STATE echoed) is finished first, so it is either made and acknowledged or never begun.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from collections.abc import Callable, Iterator

_held: list[int] | None = None  # signals that arrived while the main thread ran a held block
_caught: list[int] = []  # every SIGINT or SIGTERM caught, in order
_stop: Callable[[], bool] | None = None  # a following run's stop: True when it took the signal as one


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; raised in the main thread by the handler :func:`catch_signals` installs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def catch_signals() -> None:
    """Turn SIGINT and SIGTERM into :class:`Interrupted`, so a run stops through its normal cleanup."""
    def handler(signum: int, frame: object) -> None:
        _caught.append(signum)
        if _stop is not None and len(_caught) == 1 and _stop():  # a following run ends at its next checkpoint
            return
        if _held is not None and not _held:  # the first one waits for the held block; a second does not
            _held.append(signum)
            return
        raise Interrupted(signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    logging.getLogger().addFilter(_not_an_interrupt)


def stop_on_signal(stop: Callable[[], bool] | None) -> None:
    """From now on the first SIGINT or SIGTERM calls ``stop`` (the CLI gives a following run's
    ``FollowRuntime.take_signal``): when it returns True the run took it as a stop request and ends at its
    next checkpoint; otherwise, and for a second signal, :class:`Interrupted` is raised as before."""
    global _stop
    _stop = stop


def _not_an_interrupt(record: logging.LogRecord) -> bool:
    """Drop a library's report of an interrupt (py4j logs a traceback when one lands in a call to the
    JVM): the process says it was interrupted in its own line."""
    return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


def signal_caught() -> int | None:
    """The first SIGINT or SIGTERM this process caught, None before any."""
    return _caught[0] if _caught else None


def signals_caught() -> int:
    """How many SIGINTs and SIGTERMs this process caught."""
    return len(_caught)


@contextmanager
def signals_held() -> Iterator[None]:
    """Run the block whole: SIGINT or SIGTERM arriving meanwhile is raised as :class:`Interrupted` when
    it ends (a second one at once). Blocks outside the main thread, which gets no signals, run as they are."""
    global _held
    if _held is not None or threading.current_thread() is not threading.main_thread():
        yield
        return
    _held = []
    try:
        yield
    finally:
        arrived, _held = _held, None
    if arrived:
        raise Interrupted(arrived[0])
