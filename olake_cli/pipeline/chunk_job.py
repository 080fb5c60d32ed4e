"""One chunk scan as a Spark task: read the source's batches, then encode them or hand them to a sink.

A :class:`ChunkJob` is small and picklable (one Spark partition); it carries the source's
:class:`~olake_cli.core.contracts.ChunkReader` and what the task needs to encode the rows as RECORD
lines (``read``) or to let the destination write them itself (``sync``). Errors come back as values.
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterable, Iterator

from olake_cli.core.contracts import (BinaryCopyReader, BinaryCopySink, ChunkReader, ChunkSink, ResumableReader,
                                     WireColumnsReader)
from olake_cli.core.errors import OlakeError, TransientError, from_library
from olake_cli.shared.spool import Spool

RETRIES = int(os.environ.get("OLAKE_CHUNK_RETRIES", "3"))  # transient failures retried per chunk
BACKOFF_S = 1.0


@dataclass(frozen=True)
class ChunkJob:
    """Everything a task needs to scan one chunk of one stream."""

    stream: str
    namespace: str | None
    chunk_index: int
    reader: ChunkReader
    json_schema: dict[str, Any]
    key_columns: tuple[str, ...] = ()  # named in errors about a value that cannot be carried
    extra_data: dict[str, Any] | None = None
    spool: Spool | None = None  # where the task spools its lines (None: its own temporary folder)
    sink: ChunkSink | None = None  # sync: the destination's chunk writer; the task writes the rows
    load_id: str | None = None
    load_op_key: str | None = None

    @property
    def label(self) -> str:
        """``namespace.stream`` for messages."""
        return f"{self.namespace}.{self.stream}" if self.namespace else self.stream


@dataclass
class ScanResult:
    """What a task sends back: the file holding its chunk's encoded RECORD lines, or the error that stopped it."""

    chunk_index: int
    stream: str
    namespace: str | None
    rows: int = 0
    error: OlakeError | None = None
    seconds: float = 0.0
    spool_path: str | None = None
    spool: Spool | None = None  # where spool_path is (None: this machine's disk)
    warnings: list[str] = field(default_factory=list)
    resume_point: Any = None  # the reader stopped before its chunk's end: where the rest begins

    def emit(self, write: Callable[[bytes], Any]) -> None:
        """Hand the chunk's lines to ``write`` from the spool file, then delete it."""
        if self.spool_path:
            spool = self.spool or Spool()
            for block in spool.blocks(self.spool_path):
                write(block)
            spool.remove(self.spool_path)


def run_chunk_job(job: ChunkJob) -> ScanResult:
    """Scan one chunk, retrying transient failures with backoff and jitter (a chunk is read whole
    again: its output is replaced, never appended to)."""
    started, retried = time.monotonic(), []
    for attempt in range(RETRIES + 1):
        result = _attempt(job)
        if not isinstance(result.error, TransientError) or attempt == RETRIES:
            break
        retried.append(f"chunk {job.chunk_index}: {result.error}; retrying (attempt {attempt + 2})")
        time.sleep(min(30.0, BACKOFF_S * 2 ** attempt) * (0.5 + random.random()))
    result.warnings = retried + result.warnings
    result.seconds = time.monotonic() - started
    return result


def _attempt(job: ChunkJob) -> ScanResult:
    """One try at a chunk; errors come back in the result."""
    result = ScanResult(job.chunk_index, job.stream, job.namespace)
    spool = None
    try:
        if job.sink is not None:
            _sink_chunk(job, result)
        else:
            spool = _open_spool(job, result)
            _encode_chunk(job, result, spool)
    except OlakeError as exc:
        result.error = exc
    except Exception as exc:  # errors of other libraries arrive as many types; report them as one, with the stack
        result.error = from_library(f"chunk {job.chunk_index} of {job.label}", exc)
    if spool is not None:
        try:
            spool.close()
        except OSError as exc:  # an upload's last part failed
            result.error = result.error or TransientError(f"chunk {job.chunk_index} of {job.label}: spool: {exc}")
        if result.error is not None:
            result.spool.remove(result.spool_path)
            result.spool_path = None
    if result.error is None and isinstance(job.reader, ResumableReader):
        result.resume_point = job.reader.resume_point()
    return result


def _encode_chunk(job: ChunkJob, result: ScanResult, spool) -> None:
    from olake_cli.core.record_lines import encode_records

    wire_columns = job.reader.wire_columns if isinstance(job.reader, WireColumnsReader) else None
    for batch in job.reader.read_batches():
        if batch.num_rows == 0:
            continue
        blob = encode_records(batch, job.json_schema, job.stream, job.namespace, int(time.time() * 1000),
                              job.extra_data, job.key_columns, wire_columns(batch) if wire_columns else None)
        spool.write(blob)
        result.rows += batch.num_rows


def _sink_chunk(job: ChunkJob, result: ScanResult) -> None:
    """Hand the chunk to the sink: as binary COPY data when reader and sink both speak it (no row is
    decoded on the way), else as Arrow batches."""
    if isinstance(job.reader, BinaryCopyReader) and isinstance(job.sink, BinaryCopySink):
        casts = job.sink.copy_casts(job.namespace, job.stream)
        if casts is not None:
            result.rows, result.warnings = job.sink.write_copy(job.namespace, job.stream, job.load_id,
                                                               job.chunk_index, job.reader.copy_rows(casts))
            return
    wire_columns = job.reader.wire_columns if isinstance(job.reader, WireColumnsReader) else None
    batches = ((b, wire_columns(b) if wire_columns else None) for b in job.reader.read_batches() if b.num_rows)
    result.rows, result.warnings = job.sink.write(job.namespace, job.stream, job.load_id, job.chunk_index,
                                                  job.load_op_key, job.json_schema, batches, job.key_columns)


def _open_spool(job: ChunkJob, result: ScanResult):
    """The chunk's spool file: beside the driver on a local master, in the run's shared spool (a mount
    or a bucket) when the source names one, else on the task's own disk (the runner then sends it back
    in pieces); memory never holds the chunk's lines."""
    result.spool = job.spool or Spool()
    handle, result.spool_path = result.spool.create(job.chunk_index)
    return handle


def in_threads(func: Callable[[Any], Any], items: Iterable[Any], workers: int = 1) -> Iterator[Any]:
    """``func(item)`` for every item on ``workers`` helper threads, results in completion order (with one
    worker, in the items' order); a new call starts only when a result has been handed on, and closing
    the iterator starts no more. The main thread only waits: a driver's blocking call in it may take
    SIGINT over (ADBC cancels its query, and Ctrl-C would read as a failed scan), and the wait itself
    ends at once on an interrupt."""
    pending = iter(items)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="olake-scan")
    in_flight: set[Future] = set()
    try:
        while True:
            while len(in_flight) < workers and (item := next(pending, _NONE)) is not _NONE:
                in_flight.add(pool.submit(func, item))
            if not in_flight:
                return
            done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


_NONE = object()
