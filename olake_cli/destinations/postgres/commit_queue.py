"""Sending prepared commits on one background thread, in the order they were handed over.

The caller prepares a commit (Python and Arrow work) while the thread waits on the server for the one
before, so the two overlap. The first failure stops the queue: every later commit fails with an error
saying so and never reaches the server, so commits stay a prefix of the order they were made in. The
thread is a daemon: a process that exits with commits queued leaves them unsent, as if killed before
them (the target holds the state of what it committed, so the next run resumes from there).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import DestinationError


class CommitQueue:
    """A serial sender: ``submit`` returns a Future that completes when its commit was sent."""

    def __init__(self, name: str) -> None:
        self._items: queue.Queue[tuple[Future, Callable[[], Any]]] = queue.Queue()
        self._failed: BaseException | None = None
        self._last: Future | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, send: Callable[[], Any]) -> Future:
        """Queue ``send`` after every commit submitted before; its Future holds its result or error."""
        future: Future = Future()
        self._items.put((future, send))
        self._last = future
        return future

    def settle(self) -> None:
        """Wait until every submitted commit was sent; raise the first failure, if any."""
        if self._last is not None:
            self._last.exception()
        if self._failed is not None:
            raise self._failed

    def _run(self) -> None:
        while True:
            future, send = self._items.get()
            if not future.set_running_or_notify_cancel():
                continue
            if self._failed is not None:
                future.set_exception(DestinationError(f"not committed: an earlier commit failed "
                                                      f"({self._failed})"))
                continue
            try:
                future.set_result(send())
            except BaseException as exc:  # handed to whoever waits for this commit
                self._failed = exc
                future.set_exception(exc)
