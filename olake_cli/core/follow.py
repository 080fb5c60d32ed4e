"""What a run that follows a change log (``--follow``) is told: its commit cadence, its stop request and
what the destination has committed so far.

A following run reads the change log without an end: it checkpoints (a STATE, which the writer commits)
every ``commit_interval_s`` seconds at a transaction's end (or sooner, after as many changes as
the source checkpoints at in a bounded run), and stops at the next checkpoint once ``stop`` is set (SIGTERM or
SIGINT, see ``core.interrupts``). The source may let go of its log only up to what the destination
committed: ``committed()`` gives the latest committed state the writer reported (``sync``) or the
``--state`` file shows (``read``), or None when nothing new was committed since the last call.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from olake_cli.core.errors import OlakeError
from olake_cli.core.state import State, merge_state

IDLE_CHECKPOINT_S = 10.0  # a checkpoint that only moves an idle stream's position, at most this often
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0  # a transient failure's backoff: doubling from the first to the most
RETRY_GIVE_UP_S = 600.0  # failures going on this long (with nothing done in between) end the run
RETRY_QUIET_S = 2 * RETRY_MAX_S  # a failure this long after the last try began starts a new series


def _wait(seconds: float, stop: threading.Event) -> bool:
    return stop.wait(seconds)


class Backoff:
    """When to try again after a transient failure of a following run, and when to give up: the delay
    doubles from RETRY_FIRST_S to RETRY_MAX_S; :meth:`succeeded` starts over; failures going on for
    RETRY_GIVE_UP_S end it. One per following process: every level that retries (the capture opened
    again, the whole run started again) counts on the same give-up clock.

    ``clock`` and ``sleep`` (``sleep(seconds, stop)``: True when ``stop`` was set meanwhile) are the real
    ones unless a test gives its own."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float, threading.Event], bool] = _wait) -> None:
        self.clock, self._sleep = clock, sleep
        self.delay, self.since, self.tried = RETRY_FIRST_S, None, None

    def pause(self, delay: float, stop: threading.Event) -> bool:
        """Wait ``delay`` seconds; False when ``stop`` was set before or meanwhile (no more tries)."""
        return not stop.is_set() and not self._sleep(delay, stop)

    def failed(self) -> float | None:
        """The seconds to wait before the next try, or None to give up. A failure RETRY_QUIET_S or more
        after the last try began (the run worked meanwhile) starts a new series."""
        now = self.clock()
        if self.tried is not None and now - self.tried >= RETRY_QUIET_S:
            self.succeeded()
        self.since = self.since if self.since is not None else now
        if now - self.since > RETRY_GIVE_UP_S:
            return None
        delay, self.delay = self.delay, min(2 * self.delay, RETRY_MAX_S)
        self.tried = now + delay
        return delay

    def succeeded(self) -> None:
        """Something was done since the last failure: the next one starts a new series."""
        self.delay, self.since, self.tried = RETRY_FIRST_S, None, None


@dataclass
class Follow:
    """How a run that follows its change log commits and stops."""

    commit_interval_s: float
    stop: threading.Event = field(default_factory=threading.Event)
    committed: Callable[[], State | None] = lambda: None
    metrics_port: int | None = None  # serve Prometheus metrics there (``pipeline.follow_status``)
    retries: Backoff = field(default_factory=Backoff)  # the process's (``pipeline.following.supervised``)


class CommittedStates:
    """The state the destination has committed, as the writer reports each commit (``sync``).

    Thread-safe: the writer's thread calls :meth:`add`, the reader's calls :meth:`latest`.
    """

    def __init__(self, start: State) -> None:
        self._state = copy.deepcopy(start)
        self._changed = False
        self._lock = threading.Lock()

    def add(self, committed: State) -> None:
        """Merge a state the destination just committed."""
        with self._lock:
            self._state = merge_state(self._state, committed)
            self._changed = True

    def latest(self) -> State | None:
        """A copy of the committed state if it changed since the last call, else None."""
        with self._lock:
            if not self._changed:
                return None
            self._changed = False
            return copy.deepcopy(self._state)


class StateFileWatch:
    """The committed state as a state file shows it (``read --follow --state FILE``, which ``write
    --state FILE`` keeps): read again whenever the file changes; a file being replaced is read next time."""

    def __init__(self, path: str, load: Callable[[str], State]) -> None:
        self.path, self._load = path, load
        self._seen: tuple[int, int] | None = None

    def latest(self) -> State | None:
        """The file's state if it changed since the last call, else None."""
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp == self._seen:
            return None
        try:
            state = self._load(self.path)
        except OlakeError:  # unreadable now (removed, or replaced by hand): read it on the next call
            return None
        self._seen = stamp
        return state
