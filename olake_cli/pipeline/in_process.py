"""``sync``'s hand-off from its reader thread to its writer thread, in place of an OS pipe.

It carries what a pipe would (the bytes of protocol lines, in blocks) and, between them in the same
order, typed change tables that the reader built from its source's typed runs: those skip JSON
encoding and decoding inside one process. It is bounded (a slow destination holds the reader back, as
a full pipe would), and once the writer stops reading, the reader's next write raises BrokenPipeError.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from collections.abc import Iterator

import pyarrow as pa

_END = object()


@dataclass
class ChangeTable:
    """A stream's changes decoded as the writer adds them (``change_runs.decoded_schema``)."""

    stream: tuple
    table: pa.Table
    warnings: list[str]


class InProcessPipe:
    """An ordered, bounded queue of byte blocks and :class:`ChangeTable` items (one writer, one reader)."""

    BLOCK_BYTES = 1 << 20

    def __init__(self, depth: int = 8) -> None:
        self._queue: queue.Queue = queue.Queue(depth)
        self._pending: list[bytes] = []
        self._size = 0
        self._reading = threading.Event()
        self._reading.set()
        self._lock = threading.Lock()  # the reading side may write from more than one thread

    # -- the reader thread's side: a binary stream for MessageWriter, plus put_table

    def write(self, data: bytes) -> int:
        """Queue bytes (sent on in blocks of about 1 MiB, or at the next flush)."""
        with self._lock:
            self._pending.append(data)
            self._size += len(data)
            if self._size >= self.BLOCK_BYTES:
                self._send_pending()
        return len(data)

    def flush(self) -> None:
        """Send the bytes written so far."""
        with self._lock:
            self._send_pending()

    def put_table(self, item: ChangeTable) -> None:
        """Send a change table after the bytes written before it."""
        with self._lock:
            self._send_pending()
            self._put(item)

    def close(self) -> None:
        """End the input (after what was written)."""
        with self._lock:
            self._send_pending()
            self._put(_END)

    def _send_pending(self) -> None:
        if self._pending:
            block, self._pending, self._size = b"".join(self._pending), [], 0
            self._put(block)

    def _put(self, item: object) -> None:
        while True:
            if not self._reading.is_set():
                raise BrokenPipeError("the writing side stopped reading")
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    # -- the writer thread's side

    def items(self) -> Iterator[bytes | ChangeTable]:
        """Everything sent, in order, until the input ends."""
        while True:
            item = self._queue.get()
            if item is _END:
                return
            yield item

    def stop_reading(self) -> None:
        """The writer is done (or failed): the reader's next write raises BrokenPipeError."""
        self._reading.clear()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass


class TeePipe:
    """The reader's side of several :class:`InProcessPipe` at once (``sync`` into several destinations):
    everything written goes to each, in order; a writer that stopped reading stops the reader."""

    def __init__(self, pipes: list[InProcessPipe]) -> None:
        self.pipes = pipes

    def write(self, data: bytes) -> int:
        """Queue bytes on every pipe."""
        for pipe in self.pipes:
            pipe.write(data)
        return len(data)

    def flush(self) -> None:
        """Send the bytes written so far on every pipe."""
        for pipe in self.pipes:
            pipe.flush()

    def put_table(self, item: ChangeTable) -> None:
        """Send a change table on every pipe."""
        for pipe in self.pipes:
            pipe.put_table(item)
