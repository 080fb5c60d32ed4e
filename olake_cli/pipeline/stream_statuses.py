"""The TRACE STREAM_STATUS messages of a read: STARTED as a stream's work begins, RUNNING after its
first chunk, COMPLETE or INCOMPLETE at the end (a ``cdc`` stream stays open while its changes follow)."""

from __future__ import annotations

from olake_cli.core import messages
from olake_cli.core.catalog import CatalogStream


class StreamStatuses:
    """Emits each stream's STREAM_STATUS to ``out`` and remembers the last one."""

    def __init__(self, out: messages.MessageWriter) -> None:
        self.out = out
        self.last: dict[tuple, str] = {}  # stream key -> the last STREAM_STATUS emitted

    def set(self, stream: CatalogStream, status: str) -> None:
        """Emit a TRACE STREAM_STATUS for ``stream``."""
        self.last[stream.key] = status
        self.out.write(messages.trace_stream_status(stream.name, stream.namespace, status))

    def running(self, stream: CatalogStream) -> None:
        """A chunk of the stream succeeded: RUNNING, once."""
        if self.last.get(stream.key) == "STARTED":
            self.set(stream, "RUNNING")

    def loaded(self, stream: CatalogStream, failed: bool) -> None:
        """Every chunk of a stream is done: INCOMPLETE if one failed, else COMPLETE unless change capture
        follows."""
        if failed:
            self.set(stream, "INCOMPLETE")
        elif stream.sync_mode != "cdc":
            self.set(stream, "COMPLETE")

    def end(self, streams: list[CatalogStream], status: str) -> None:
        """Give every stream still open (STARTED or RUNNING) its final ``status``; best effort on failure."""
        try:
            for stream in streams:
                if self.last.get(stream.key) in ("STARTED", "RUNNING"):
                    self.set(stream, status)
            self.out.flush()
        except OSError:  # the reader of stdout is gone: nobody is left to tell
            pass
