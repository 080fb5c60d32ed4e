"""Progress of a run: per-stream tallies the pipeline updates, shown by a view the CLI chooses.

The pipeline calls :class:`Progress`; what the user sees comes from a :class:`ProgressView` (text
lines, a live terminal display, JSON objects), so nothing here knows about terminals. Everything a
view writes goes to stderr, never to stdout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

CHANGES = "change capture"  # the tally of change rows (the change log is not split by stream)


@dataclass
class StreamProgress:
    """One stream's work so far: chunks done of planned, rows, the planner's row estimate."""

    label: str
    chunks_total: int = 0
    chunks_done: int = 0
    rows: int = 0
    row_estimate: int | None = None
    last_chunk: tuple[int, float] = (0, 0.0)  # rows and seconds of the latest chunk
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    complete: bool = False

    @property
    def seconds(self) -> float:
        """Seconds since the stream started (until it ended)."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Rows per second so far."""
        return self.rows / max(self.seconds, 1e-6)

    def eta(self) -> float | None:
        """Seconds left: from the row estimate when there is one, else from the chunks; None if unknown."""
        if self.ended is not None:
            return 0.0
        if self.row_estimate and self.rows:
            return max(self.row_estimate - self.rows, 0) / max(self.rate, 1e-6)
        if self.chunks_done and self.chunks_total:
            return self.seconds / self.chunks_done * (self.chunks_total - self.chunks_done)
        return None

    def fields(self) -> dict[str, object]:
        """The tallies as JSON-ready fields (for machine-readable logs)."""
        return {"stream": self.label, "rows": self.rows, "chunks_done": self.chunks_done,
                "chunks_total": self.chunks_total, "row_estimate": self.row_estimate,
                "seconds": round(self.seconds, 3), "rows_per_second": round(self.rate)}


class ProgressView(Protocol):
    """Shows progress events: ``started``, ``chunk``, ``changes`` and ``finished``."""

    def show(self, event: str, stream: StreamProgress) -> None:
        """Show one event of ``stream`` (its tallies already updated)."""
        ...


def describe(event: str, stream: StreamProgress) -> str | None:
    """The one-line text of an event, or None for events shown only live (``started``, ``changes``)."""
    if event == "chunk":
        rows, seconds = stream.last_chunk
        return (f"{stream.label}: chunk {stream.chunks_done}/{stream.chunks_total}: {rows} rows "
                f"in {seconds:.1f}s (total {stream.rows} rows, {stream.rate:,.0f} rows/s)")
    if event == "finished":
        outcome = "" if stream.complete else "incomplete: "
        chunks = f" in {stream.chunks_done}/{stream.chunks_total} chunk(s)" if stream.chunks_total else ""
        return (f"{stream.label}: {outcome}{stream.rows} rows{chunks} in {stream.seconds:.1f}s "
                f"({stream.rate:,.0f} rows/s)")
    return None


class LineView:
    """Plain lines through ``log``: one per finished chunk and a summary per stream (the change phase
    logs its own summary)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log

    def show(self, event: str, stream: StreamProgress) -> None:
        """Log the event's line, if it has one."""
        text = describe(event, stream) if stream.label != CHANGES else None
        if text is not None:
            self.log(text)


class Progress:
    """The tallies of a run, by stream label; every change is passed on to the view."""

    def __init__(self, view: ProgressView) -> None:
        self.view = view
        self.streams: dict[str, StreamProgress] = {}

    def stream_started(self, label: str, chunks: int, row_estimate: int | None = None) -> None:
        """A stream's work begins: ``chunks`` planned (0 for change capture), rows estimated if known."""
        stream = self.streams[label] = StreamProgress(label, chunks_total=chunks, row_estimate=row_estimate)
        self.view.show("started", stream)

    def chunk_added(self, label: str) -> None:
        """A stream's load grew by one chunk (the rest of a chunk whose task stopped early)."""
        self.streams[label].chunks_total += 1

    def chunk_done(self, label: str, rows: int, seconds: float) -> None:
        """One chunk (or incremental pass) of a stream finished with ``rows`` rows."""
        stream = self.streams[label]
        stream.chunks_done += 1
        stream.rows += rows
        stream.last_chunk = (rows, seconds)
        self.view.show("chunk", stream)

    def changes(self, rows: int) -> None:
        """Change rows were emitted (counted together, under :data:`CHANGES`)."""
        stream = self.streams.get(CHANGES)
        if stream is None:
            stream = self.streams[CHANGES] = StreamProgress(CHANGES)
        stream.rows += rows
        self.view.show("changes", stream)

    def stream_finished(self, label: str, complete: bool) -> None:
        """A stream's work ended, all of it (``complete``) or not."""
        stream = self.streams.get(label)
        if stream is None or stream.ended is not None:
            return
        stream.ended, stream.complete = time.monotonic(), complete
        self.view.show("finished", stream)
