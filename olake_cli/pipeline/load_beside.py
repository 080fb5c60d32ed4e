"""Full loads scanned beside a following change phase: a stream that starts (or resumes) its load while
others are already in change capture is loaded on a thread of its own, and the others' changes keep
flowing and committing meanwhile.

How the load joins change capture exactly (the first-load path, only concurrent): the load's rows rank
at the change position captured before its snapshot, and that position is in the stream's state from
the load's first STATE on. The source lets go of its change log only up to the lowest position of all
its change-capture streams in the committed state (a PostgreSQL slot's confirmed position), the loading
one included, so the changes made to the stream during its load stay in the log; the change phase leaves
them out while the stream loads. When the load ends, the change phase ends its reading at its next
checkpoint and opens the capture again with the stream added: the log is read again from the lowest
committed position, the other streams' changes already emitted are dropped (``changes._ChangeEmitter``),
and the new stream's changes after its load position follow its load, as after a first load.

The loading thread and the change phase write to one message stream: each chunk's rows and STATE, and
each change batch with its checkpoint, are written whole under one lock, so a STATE never commits part
of the other's rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.follow import Follow

RELAY_POLL_S = 0.2  # how often a reading that waits for a load's end also checks the run's stop request
STOP_WAIT_S = 5.0  # a run stopped by a signal waits this long for a chunk in flight, then exits without it


class LoadBeside:
    """A run's full loads on a thread while its change phase follows; see the module's docstring.

    ``scan(cancel)`` scans the loads (stopping at a chunk's end once ``cancel`` is set); ``session`` is
    the source's read session, closed when the scan ends; ``joining()`` (called once the loads ended)
    gives the streams whose change capture starts now, or None when the loads failed and the run ends.
    """

    def __init__(self, scan: Callable[[threading.Event], None], session: AbstractContextManager,
                 joining: Callable[[], list[CatalogStream] | None], lock: threading.RLock) -> None:
        self.cancel, self.done, self.lock = threading.Event(), threading.Event(), lock
        self.joining = joining
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(scan, session), name="olake-load", daemon=True)

    def start(self) -> None:
        """Start scanning."""
        self._thread.start()

    def _run(self, scan: Callable[[threading.Event], None], session: AbstractContextManager) -> None:
        try:
            with session:
                scan(self.cancel)
        except BaseException as exc:  # re-raised on the change phase's side (finish)
            self.failure = exc
        finally:
            self.done.set()

    def until_loaded(self, follow: Follow) -> Follow:
        """``follow`` whose stop request is also made when the loads end (the capture then opens again
        with their streams); ``follow`` itself once they have ended."""
        if self.done.is_set():
            return follow
        stop = threading.Event()

        def relay() -> None:
            while not stop.is_set():
                if follow.stop.wait(RELAY_POLL_S) or self.done.is_set():
                    stop.set()

        threading.Thread(target=relay, name="olake-load-relay", daemon=True).start()
        return replace(follow, stop=stop)

    def joined(self) -> list[CatalogStream] | None:
        """Once the loads ended: the streams that join change capture now (None: the run ends); raises
        what failed on the loading thread."""
        self.finish()
        return self.joining()

    def finish(self, stopping: bool = False) -> None:
        """Stop the loads if they still run: nothing more is written from their thread (a chunk in flight
        is done again by the next run); wait for them (``stopping``, a signal ended the run: at most
        STOP_WAIT_S); raise what failed on their thread (their chunks' errors are the run's)."""
        with self.lock:
            self.cancel.set()
        self._thread.join(STOP_WAIT_S if stopping else None)
        if self.failure is not None:
            raise self.failure
