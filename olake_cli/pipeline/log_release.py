"""The follow runtime's hand-off of what the destination committed: a thread asks the run's ``committed()``
every RELAY_EVERY_S seconds and hands each new committed state to the run's status (metrics, lag) and to a
change capture that keeps a log for the pipeline (``core.follow.ReleasesLog``: a PostgreSQL slot), which
lets the log go up to there. No source asks for committed states itself."""

from __future__ import annotations

import threading
from collections.abc import Callable

from olake_cli.core.follow import ReleasesLog
from olake_cli.core.state import State

RELAY_EVERY_S = 0.2


class CommitRelay:
    """Hands committed states on while it runs (a context manager: its thread is joined on exit)."""

    def __init__(self, committed: Callable[[], State | None], status, capture: object,
                 log: Callable[[str], None]) -> None:
        self.committed, self.status, self.log = committed, status, log
        self.capture = capture if isinstance(capture, ReleasesLog) else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="olake-commit-relay", daemon=True)
        self._failed = False

    def __enter__(self) -> CommitRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def relay(self) -> None:
        """Hand on the committed state, if a new one came since the last call."""
        state = self.committed()
        if state is None:
            return
        self.status.committed(state)
        if self.capture is not None:
            self.capture.release(state)

    def _run(self) -> None:
        while not self._stop.wait(RELAY_EVERY_S):
            try:
                self.relay()
            except Exception as exc:  # the source is away for now: the next call may work; said once
                if not self._failed:
                    self._failed = True
                    self.log(f"change capture: could not let the change log go up to the last commit yet "
                             f"({type(exc).__name__}); trying again")
