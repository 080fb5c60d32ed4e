"""Progress of a run: per-stream tallies the pipeline updates, shown by a view the CLI chooses.

The pipeline calls :class:`Progress`; what the user sees comes from a :class:`ProgressView` (text
lines, a live terminal display, JSON objects), so nothing here knows about terminals. Everything a
view writes goes to stderr, never to stdout. A run ends with a ``summary`` event per stream: rows
loaded, changes by kind, duration and the position reached.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol
from collections.abc import Callable, Iterable

CHANGE_KINDS = {"c": "inserted", "u": "updated", "d": "deleted", "t": "truncated"}
REPLAYED = "replayed from before the load (already in it)"  # changes a source replays to miss none


@dataclass
class StreamProgress:
    """One stream's work so far: chunks done of planned, rows, changes by kind, the planner's estimate.

    Chunks keep the numbers of their load: a resumed load starts with the chunks done before counted.
    """

    label: str
    chunks_total: int = 0
    chunks_done: int = 0
    chunks_before: int = 0  # done by an earlier run (a resumed load)
    rows: int = 0
    row_estimate: int | None = None
    last_chunk: tuple[int, int, float] = (0, 0, 0.0)  # number (1-based), rows and seconds of the latest chunk
    changes: dict[str, int] = field(default_factory=dict)  # change rows by kind: c, u, d, t
    replayed: int = 0  # of those, changes made before the stream's load began (the load holds them already)
    captures: bool = False  # its changes are read in this run
    position: str | None = None  # the position reached, as people read it (set when the run ends)
    started: float = field(default_factory=time.monotonic)
    first_chunk_started: float | None = None
    ended: float | None = None
    complete: bool = False

    @property
    def seconds(self) -> float:
        """Seconds since the stream started (until it ended)."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    @property
    def scan_seconds(self) -> float:
        """Seconds since its first chunk began (Spark's start-up left out), until it ended: a part of
        :attr:`seconds`."""
        begun = max(self.first_chunk_started or self.started, self.started)
        return (self.ended if self.ended is not None else time.monotonic()) - begun

    @property
    def rate(self) -> float:
        """Rows per second over :attr:`scan_seconds`."""
        return self.rows / max(self.scan_seconds, 1e-6)

    def eta(self) -> float | None:
        """Seconds left: from the row estimate when there is one, else from the chunks; None if unknown."""
        if self.ended is not None:
            return 0.0
        if self.row_estimate and self.rows:
            return max(self.row_estimate - self.rows, 0) / max(self.rate, 1e-6)
        done_now = self.chunks_done - self.chunks_before
        if done_now and self.chunks_total:
            return self.seconds / done_now * (self.chunks_total - self.chunks_done)
        return None

    def change_count(self) -> int:
        """Change rows of every kind."""
        return sum(self.changes.values())

    def fields(self) -> dict[str, object]:
        """The tallies as JSON-ready fields (for machine-readable logs)."""
        return {"stream": self.label, "rows": self.rows, "chunks_done": self.chunks_done,
                "chunks_total": self.chunks_total, "chunks_before": self.chunks_before,
                "row_estimate": self.row_estimate,
                "changes": {CHANGE_KINDS[kind]: self.changes.get(kind, 0) for kind in ("c", "u", "d")},
                "replayed_changes": self.replayed,
                "position": self.position, "seconds": round(self.seconds, 3),
                "scan_seconds": round(self.scan_seconds, 3), "rows_per_second": round(self.rate)}


class ProgressView(Protocol):
    """Shows progress events: ``started``, ``chunk``, ``changes``, ``finished`` and ``summary``."""

    def show(self, event: str, stream: StreamProgress) -> None:
        """Show one event of ``stream`` (its tallies already updated)."""
        ...


def describe(event: str, stream: StreamProgress) -> str | None:
    """The one-line text of an event, or None for events shown only live (``started``, ``changes``).

    Every rate is the rows it follows over the seconds it follows; a resumed load counts the rows of
    this run, and says how many of its chunks an earlier run loaded.
    """
    if event == "chunk":
        number, rows, seconds = stream.last_chunk
        return (f"{stream.label}: chunk {number}/{stream.chunks_total}: {rows} rows in {seconds:.1f}s "
                f"({rows / max(seconds, 1e-6):,.0f} rows/s); {stream.rows} rows so far{_this_run(stream)}")
    if event == "finished":
        outcome = "" if stream.complete else "incomplete: "
        chunks = f" in {stream.chunks_done}/{stream.chunks_total} chunk(s)" if stream.chunks_total else ""
        return (f"{stream.label}: {outcome}{stream.rows} rows{chunks}{_this_run(stream)} in {stream.seconds:.1f}s, "
                f"{stream.scan_seconds:.1f}s of it scanning ({stream.rate:,.0f} rows/s)")
    if event == "summary":
        return f"summary: {stream.label}: " + "; ".join(summary_parts(stream))
    return None


def summary_parts(stream: StreamProgress) -> list[str]:
    """What a run did for a stream: rows loaded, changes by kind, duration, position reached."""
    loaded = f"{stream.rows} rows loaded"
    if stream.chunks_before:
        loaded += (f" in this run ({stream.chunks_done}/{stream.chunks_total} chunks, {stream.chunks_before} of them "
                   "loaded by an earlier run)")
    elif stream.chunks_total:
        loaded += f" ({stream.chunks_done}/{stream.chunks_total} chunks)"
    parts = [loaded if stream.complete or not stream.chunks_total else "incomplete: " + loaded]
    if stream.captures or stream.changes:
        kinds = [f"{stream.changes.get(kind, 0)} {CHANGE_KINDS[kind]}" for kind in ("c", "u", "d")]
        if stream.changes.get("t"):
            kinds.append(f"{stream.changes['t']} truncated")
        replayed = f", of which {stream.replayed} {REPLAYED}" if stream.replayed else ""
        parts.append("changes: " + ", ".join(kinds) + replayed)
    parts.append(f"{stream.seconds:.1f}s")
    if stream.position is not None:
        parts.append(f"position {stream.position}")
    return parts


def _this_run(stream: StreamProgress) -> str:
    """For a resumed load: that the rows are this run's, and how many chunks an earlier run loaded."""
    if not stream.chunks_before:
        return ""
    return f" in this run ({stream.chunks_before} chunk(s) loaded by an earlier run)"


class LineView:
    """Plain lines through ``log``: one per finished chunk, one when a stream's load ends, and the
    run's summary per stream."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log

    def show(self, event: str, stream: StreamProgress) -> None:
        """Log the event's line, if it has one."""
        text = describe(event, stream)
        if text is not None:
            self.log(text)


class Progress:
    """The tallies of a run, by stream label; every change is passed on to the view."""

    def __init__(self, view: ProgressView) -> None:
        self.view = view
        self.streams: dict[str, StreamProgress] = {}

    def stream_started(self, label: str, chunks: int, row_estimate: int | None = None, done: int = 0) -> None:
        """A stream's work begins: ``chunks`` in its load (0 for change capture), ``done`` of them
        already done by an earlier run, rows estimated if known."""
        stream = self.streams[label] = StreamProgress(label, chunks_total=chunks, chunks_done=done,
                                                      chunks_before=done, row_estimate=row_estimate)
        self.view.show("started", stream)

    def chunk_added(self, label: str) -> None:
        """A stream's load grew by one chunk (the rest of a chunk whose task stopped early)."""
        self.streams[label].chunks_total += 1

    def chunk_done(self, label: str, number: int, rows: int, seconds: float) -> None:
        """Chunk ``number`` (1-based, as planned) or an incremental pass of a stream finished with ``rows``."""
        stream = self.streams[label]
        stream.chunks_done += 1
        stream.rows += rows
        stream.last_chunk = (number, rows, seconds)
        began = time.monotonic() - seconds
        if stream.first_chunk_started is None or began < stream.first_chunk_started:
            stream.first_chunk_started = began
        self.view.show("chunk", stream)

    def capture_started(self, labels: Iterable[str]) -> None:
        """Change capture begins for these streams (their changes are counted from now)."""
        for label in labels:
            stream = self.streams.get(label)
            if stream is None:
                stream = self.streams[label] = StreamProgress(label, complete=True)
            stream.captures = True
            self.view.show("changes", stream)

    def changes(self, label: str, counts: dict[str, int], replayed: int = 0) -> None:
        """Change rows of a stream were emitted, counted by kind (``c``, ``u``, ``d``, ``t``); ``replayed``
        of them were made before the stream's load began (see ``ChangeRun.replayed``)."""
        stream = self.streams.get(label) or self.streams.setdefault(label, StreamProgress(label, complete=True))
        for kind, count in counts.items():
            stream.changes[kind] = stream.changes.get(kind, 0) + count
        stream.replayed += replayed
        self.view.show("changes", stream)

    def stream_finished(self, label: str, complete: bool) -> None:
        """A stream's load or pass ended, all of it (``complete``) or not."""
        stream = self.streams.get(label)
        if stream is None or stream.ended is not None:
            return
        stream.ended, stream.complete = time.monotonic(), complete
        self.view.show("finished", stream)

    def run_finished(self, positions: dict[str, str | None]) -> None:
        """The run ends: a ``summary`` event for every stream, with the position it reached."""
        now = time.monotonic()
        for label, stream in self.streams.items():
            if stream.captures or stream.ended is None:
                stream.ended = now
            stream.position = positions.get(label)
            self.view.show("summary", stream)
