"""Progress lines on stderr for long work (never on stdout)."""

from __future__ import annotations

import time
from typing import Callable


class Progress:
    """Counts finished chunks and rows and reports them with a rate."""

    def __init__(self, log: Callable[[str], None], total_chunks: int) -> None:
        self.log, self.total = log, total_chunks
        self.done, self.rows = 0, 0
        self.started = time.monotonic()

    def chunk_done(self, label: str, rows: int, seconds: float) -> None:
        """Report one finished chunk."""
        self.done += 1
        self.rows += rows
        elapsed = max(time.monotonic() - self.started, 1e-6)
        self.log(f"chunk {self.done}/{self.total} of {label}: {rows} rows in {seconds:.1f}s "
                 f"(total {self.rows} rows, {self.rows / elapsed:,.0f} rows/s)")

    def finish(self) -> None:
        """Report the totals."""
        elapsed = time.monotonic() - self.started
        if self.total:
            self.log(f"read {self.rows} rows in {self.done} chunk(s) in {elapsed:.1f}s")
