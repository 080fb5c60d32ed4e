"""How a run's progress looks on stderr: a live ``rich`` display on a terminal, plain lines otherwise,
JSON objects with ``--log-format json``. The pipeline only sees a :class:`ProgressView`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from collections.abc import Iterator

from olake_cli.cli.report import log, log_format
from olake_cli.pipeline.progress import LineView, ProgressView, StreamProgress, describe


class JsonView:
    """One JSON log object per finished chunk, per finished stream and per stream of the run's summary,
    with the tallies as fields."""

    def show(self, event: str, stream: StreamProgress) -> None:
        """Log the event with its fields, if it has a line."""
        text = describe(event, stream)
        if text is not None:
            level = "warn" if event in ("finished", "summary") and not stream.complete else "info"
            log(text, level, event=event, **stream.fields())


class LiveView:
    """A ``rich`` live display on stderr: a line per stream with rows, changes, rows/s, chunks done/total
    and ETA; a stream name too long for that line gets a line of its own, whole. The run's summary is
    printed under the display once it stops.

    It starts with the first event; log lines written meanwhile appear above it.
    """

    def __init__(self) -> None:
        self.streams: dict[str, StreamProgress] = {}
        self.summary: list[str] = []
        self.live = None

    def show(self, event: str, stream: StreamProgress) -> None:
        """Track the stream; the display refreshes itself."""
        if event == "summary":
            self.summary.append(describe(event, stream))
            return
        self.streams[stream.label] = stream
        if self.live is None:
            from rich.console import Console
            from rich.live import Live

            self.live = Live(get_renderable=self._table, console=Console(stderr=True), refresh_per_second=4,
                             redirect_stdout=False, redirect_stderr=True)
            self.live.start()
        elif event == "finished":
            self.live.refresh()

    def close(self) -> None:
        """Stop the display, leaving its last state on screen, then print the summary lines."""
        if self.live is not None:
            self.live.stop()
        for line in self.summary:
            log(line)

    def _table(self):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        streams = list(self.streams.values())
        width = self.live.console.width if self.live is not None else 80
        one_line = max((len(s.label) for s in streams), default=0) + 2 + METRICS_WIDTH <= width
        table = Table.grid(padding=(0, 2))
        rows = []
        for stream in streams:
            chunks = f"chunks {stream.chunks_done}/{stream.chunks_total}" if stream.chunks_total else ""
            changes = f", {stream.change_count():,} changes" if stream.captures else ""
            bar_width = BAR_WIDTH if one_line else None
            cells = (ProgressBar(total=stream.chunks_total or None, completed=stream.chunks_done, width=bar_width),
                     f"{stream.rows:,} rows{changes}", f"{stream.rate:,.0f} rows/s", chunks, _outcome(stream))
            if one_line:
                table.add_row(stream.label, *cells)
            else:  # the name on a line of its own, never cut; the tallies indented below it
                rows += [Text(stream.label, overflow="fold"), _indented(cells)]
        return table if one_line else Group(*rows)


BAR_WIDTH = 16
METRICS_WIDTH = BAR_WIDTH + 58  # rows and changes, rows/s, chunks, ETA, with the gaps between them


def _indented(cells: tuple):
    """One stream's tallies as a grid row, two spaces in; the bar takes what the numbers leave."""
    from rich.table import Table

    row = Table.grid(padding=(0, 2), expand=True)
    row.add_column(width=0)
    row.add_column(ratio=1, no_wrap=True)
    for _ in cells[1:]:
        row.add_column(no_wrap=True)
    row.add_row("", *cells)
    return row


def _outcome(stream: StreamProgress) -> str:
    """``done``, ``incomplete`` or the ETA of a stream still running."""
    if stream.ended is not None:
        return "done" if stream.complete else "incomplete"
    eta = stream.eta()
    if eta is None:
        return ""
    minutes, seconds = divmod(int(eta), 60)
    return f"ETA {minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


@contextmanager
def progress_view() -> Iterator[ProgressView]:
    """The view for this process: JSON objects, a live display (stderr is a terminal) or plain lines."""
    if log_format() == "json":
        yield JsonView()
    elif sys.stderr.isatty():
        view = LiveView()
        try:
            yield view
        finally:
            view.close()
    else:
        yield LineView(log)
