"""What a run that follows a change log (``--follow``) is told: its commit cadence, its stop request and
what the destination has committed so far.

A following run reads the change log without an end: it checkpoints (a STATE, which the writer commits)
every ``commit_interval_s`` seconds at a transaction's end (or sooner, after as many changes as
the source checkpoints at in a bounded run), and stops at the next checkpoint once ``stop`` is set (SIGTERM or
SIGINT, see ``core.interrupts``). When a checkpoint is due is the runtime's :class:`CommitPolicy`; where
one is safe only the source knows. The source may let go of its log only up to what the destination
committed: ``committed()`` gives the latest committed state the writer reported (``sync``) or the
``--state`` file shows (``read``), or None when nothing new was committed since the last call; the
runtime (``pipeline.changes``) hands each to a capture that keeps a log for the pipeline
(:class:`ReleasesLog`), and no source asks for it itself.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from olake_cli.core.errors import OlakeError
from olake_cli.core.state import State, merge_state

IDLE_CHECKPOINT_S = 10.0  # a checkpoint that only moves an idle stream's position, at most this often
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0  # a transient failure's backoff: doubling from the first to the most
RETRY_GIVE_UP_S = 600.0  # failures going on this long (with nothing done in between) end the run
RETRY_QUIET_S = 2 * RETRY_MAX_S  # a failure this long after the last try began starts a new series
# Changes between checkpoints at transactions' ends (inside one huge transaction every 5x as many), for
# bounded and following runs alike. OLAKE_CDC_CHECKPOINT_EVERY overrides it (tests checkpoint more often).
CHECKPOINT_EVERY = max(1, int(os.environ.get("OLAKE_CDC_CHECKPOINT_EVERY", "20000")))
INSIDE_FACTOR = 5


class CommitPolicy:
    """When a following run checkpoints (Debezium's ``OffsetCommitPolicy``): a source says where it may
    (a transaction's end, a point inside a transaction, an idle moment) and how many changes it holds
    since the last checkpoint, and asks; only the source knows where a checkpoint is safe, the policy
    alone says when one is due:

    - at a transaction's end, with changes pending: after ``every`` of them, or ``interval_s`` after the
      last checkpoint;
    - inside a transaction: after INSIDE_FACTOR x ``every`` changes (a huge transaction);
    - at an idle moment: ``interval_s`` after the last checkpoint with changes pending; with none, when
      the position moved and max(``interval_s``, ``idle_s``) has passed (keeps an idle position fresh).
    """

    def __init__(self, interval_s: float, every: int = CHECKPOINT_EVERY, idle_s: float = IDLE_CHECKPOINT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s, self.every, self.idle_s, self._clock = interval_s, every, idle_s, clock
        self._at = clock()

    def at_end(self, pending: int) -> bool:
        """Whether a checkpoint is due at a transaction's end."""
        return pending > 0 and (pending >= self.every or self._waited() >= self.interval_s)

    def inside(self, pending: int) -> bool:
        """Whether a checkpoint is due inside a transaction."""
        return pending >= INSIDE_FACTOR * self.every

    def idle(self, pending: int, moved: bool) -> bool:
        """Whether a checkpoint is due at an idle moment (``moved``: the position is past the last one)."""
        if pending:
            return self._waited() >= self.interval_s
        return moved and self._waited() >= max(self.interval_s, self.idle_s)

    def checkpointed(self) -> None:
        """A checkpoint was set now."""
        self._at = self._clock()

    def held_between(self, low: float, high: float) -> float:
        """The checkpoint interval held between ``low`` and ``high`` seconds: how often a following source
        looks again at what it watches (keeping pace with its commits, within bounds)."""
        return min(max(self.interval_s, low), high)

    def wait(self, stop: threading.Event) -> bool:
        """For a source read in bounded rounds: wait until the next round is due; True when ``stop`` came."""
        return stop.wait(self.interval_s)

    def _waited(self) -> float:
        return self._clock() - self._at


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
    retries: Backoff = field(default_factory=Backoff)  # the run's (``pipeline.follow_runtime``)
    requested: threading.Event = field(default_factory=threading.Event)  # the run's stop request (not a restart)
    stoppable: threading.Event = field(default_factory=threading.Event)  # set once a stop can end it gently
    policy: CommitPolicy = field(init=False)  # when to checkpoint, from ``commit_interval_s``

    def __post_init__(self) -> None:
        self.policy = CommitPolicy(self.commit_interval_s)


@runtime_checkable
class ReleasesLog(Protocol):
    """A change capture whose source keeps its log until told (a PostgreSQL replication slot)."""

    def release(self, committed: State) -> object:
        """The destination committed ``committed``: let go of the log up to the lowest position of the
        capture's streams in it (thread-safe: the runtime calls it from its own thread)."""
        ...


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
