"""How a run's progress looks on stderr: a live ``rich`` display on a terminal, plain lines otherwise,
JSON objects with ``--log-format json``. The pipeline only sees a :class:`ProgressView`."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

from olake_cli.cli.report import log, log_format
from olake_cli.pipeline.progress import LineView, ProgressView, StreamProgress, describe


class JsonView:
    """One JSON log object per finished chunk and per finished stream, with the tallies as fields."""

    def show(self, event: str, stream: StreamProgress) -> None:
        """Log the event with its fields, if it has a line."""
        text = describe(event, stream)
        if text is not None:
            log(text, "info" if event != "finished" or stream.complete else "warn", event=event, **stream.fields())


class LiveView:
    """A ``rich`` live display on stderr: a line per stream with rows, rows/s, chunks done/total and ETA.

    It starts with the first event; log lines written meanwhile appear above it.
    """

    def __init__(self) -> None:
        self.streams: dict[str, StreamProgress] = {}
        self.live = None

    def show(self, event: str, stream: StreamProgress) -> None:
        """Track the stream; the display refreshes itself."""
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
        """Stop the display, leaving its last state on screen."""
        if self.live is not None:
            self.live.stop()

    def _table(self):
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        for stream in list(self.streams.values()):
            bar = ProgressBar(total=stream.chunks_total or None, completed=stream.chunks_done, width=24)
            chunks = f"chunks {stream.chunks_done}/{stream.chunks_total}" if stream.chunks_total else ""
            table.add_row(stream.label, bar, f"{stream.rows:,} rows", f"{stream.rate:,.0f} rows/s", chunks,
                          _outcome(stream))
        return table


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
