"""A thread that keeps writing to a source while a test runs, and reports what it met when stopped."""

from __future__ import annotations

import random
import threading


class WriterThread(threading.Thread):
    """Calls :meth:`write` (a subclass's loop, ending once ``stop_event`` is set) on a daemon thread;
    :meth:`stop` ends it and raises the error it met, if any. ``rng`` is seeded; ``transactions`` counts."""

    def __init__(self, seed: int) -> None:
        super().__init__(daemon=True)
        self.rng, self.stop_event, self.transactions = random.Random(seed), threading.Event(), 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.write()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def write(self) -> None:
        """Write until ``stop_event`` is set."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop and re-raise any error the writer met."""
        self.stop_event.set()
        self.join(timeout=30)
        if self.error:
            raise self.error
