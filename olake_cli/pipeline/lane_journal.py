"""One destination's writer in a following ``sync`` into several (``pipeline.fan_out``), which outlives a
transient failure of its destination while the others go on.

Its pipe is drained into a :class:`Journal` that keeps what reached the writer since the destination's
last acknowledged commit (up to JOURNAL_BYTES, after which the reader waits, holding every destination
back). When the destination fails transiently, the writer waits out a backoff, opens the destination
again and reads the journal from the oldest item its commits did not cover: what the destination already
holds is dropped as a replay (its chunks done, its watermark or its replay floors), the rest is written.
A destination that keeps failing for RETRY_GIVE_UP_S ends the run with one line naming it; the other
destinations keep what they committed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from olake_cli.core.errors import ConnectionFailed, DestinationError, TransientError
from olake_cli.core.follow import RETRY_GIVE_UP_S, Backoff, Follow
from olake_cli.pipeline.follow_runtime import retry_pause
from olake_cli.pipeline.in_process import ChangeTable, InProcessPipe

JOURNAL_BYTES = 256 << 20


class Journal:
    """A lane's input since its destination's last acknowledged commit; filled from the lane's pipe by a
    thread of its own, read (and after a failure read again) by the lane's writer."""

    def __init__(self, pipe: InProcessPipe, limit: int = JOURNAL_BYTES) -> None:
        self.pipe, self.limit = pipe, limit
        self.items: list[Any] = []
        self.base = 0  # the index of items[0]
        self.size = 0
        self.ended = False
        self.current = 0  # the index of the item the writer reads now
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._fill, name="olake-journal", daemon=True)

    def start(self) -> None:
        """Start draining the pipe."""
        self.thread.start()

    def read_from(self, start: int) -> Iterator[Any]:
        """The items from index ``start`` on, waiting for more until the input ends."""
        index = max(start, self.base)
        while True:
            with self.cond:
                while index >= self.base + len(self.items) and not self.ended:
                    self.cond.wait()
                if index >= self.base + len(self.items):
                    return
                item = self.items[index - self.base]
                self.current = index
            yield item
            index += 1

    def drop_before(self, index: int) -> None:
        """The destination committed everything before item ``index``: forget those items."""
        with self.cond:
            while self.base < index and self.items:
                self.size -= _size(self.items.pop(0))
                self.base += 1
            self.cond.notify_all()

    def _fill(self) -> None:
        try:
            for item in self.pipe.items():
                with self.cond:
                    while self.size > self.limit and self.items:
                        self.cond.wait()
                    self.items.append(item)
                    self.size += _size(item)
                    self.cond.notify_all()
        finally:
            with self.cond:
                self.ended = True
                self.cond.notify_all()


def _size(item: Any) -> int:
    return item.table.nbytes if isinstance(item, ChangeTable) else len(item)


class LaneRetries:
    """The writer loop of one lane: ``write(items, on_state, on_committed)`` runs one writer over
    ``items``; a transient failure is retried from the journal (see the module docstring)."""

    def __init__(self, name: str, journal: Journal, follow: Follow, log: Callable[[str], None],
                 reopened: Callable[[int], None]) -> None:
        self.name, self.journal, self.follow, self.log = name, journal, follow, log
        # before a retry, given how many acknowledged STATEs the journal gives again: the lane's replay
        # floors from what its destination holds, and its stdout told to pass over those STATEs
        self.reopened = reopened
        self.marks: deque[int] = deque()  # per STATE taken and not acknowledged yet: its item's index
        self.last_mark, self.acked_at_last = -1, 0  # the newest acknowledged STATE's item, and how many there
        self.backoff = Backoff()

    def state_taken(self) -> None:
        """The writer took a STATE (in the item it reads now) to commit it."""
        self.marks.append(self.journal.current)

    def committed(self) -> None:
        """The destination acknowledged the oldest STATE taken: the items before its own are covered."""
        if self.marks:
            mark = self.marks.popleft()
            self.acked_at_last = self.acked_at_last + 1 if mark == self.last_mark else 1
            self.last_mark = mark
            self.journal.drop_before(mark)
            self.backoff.succeeded()

    def run(self, write: Callable[[Iterator[Any]], None]) -> None:
        """``write`` over the journal, again from the oldest uncovered item after each transient failure."""
        start, retrying = 0, False
        while True:
            try:
                if retrying:
                    self.reopened(self.acked_at_last if start == self.last_mark else 0)
                write(self.journal.read_from(start))
                return
            except (TransientError, ConnectionFailed) as exc:
                if self.journal.ended or self.follow.stop.is_set():
                    raise
                self._pause(exc)
                start, self.marks, retrying = self.journal.base, deque(), True

    def _pause(self, exc: Exception) -> None:
        try:
            again = retry_pause(exc, self.backoff, self.follow.stop, self.log, self.name,
                                "the other destinations go on; trying it again")
        except (TransientError, ConnectionFailed) as final:
            raise DestinationError(f"{self.name}: failing for {RETRY_GIVE_UP_S / 60:.0f} min ({final}); the run "
                                   f"stops, and the other destinations keep what they committed") from final
        if not again:
            raise exc
