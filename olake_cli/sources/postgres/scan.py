"""Chunk scans: run in a Spark task, read one chunk under the exported snapshot into Arrow, encode it."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from olake_cli.core.errors import OlakeError, SourceError


@dataclass(frozen=True)
class ScanTask:
    """Everything a task needs to scan one chunk; small and picklable (one Spark partition)."""

    stream: str
    namespace: str | None
    chunk_index: int
    query: str
    uri: str = field(repr=False)
    snapshot_id: str | None
    json_schema: dict[str, Any]
    batch_rows: int = 10_000
    extra_data: dict[str, Any] | None = None
    spool_dir: str | None = None  # local runs: tasks write lines here instead of returning them
    sink: Any = None  # sync: the destination's chunk writer; the task writes the rows itself
    load_id: str | None = None
    snapshot_key: str | None = None
    key_columns: tuple[str, ...] = ()  # named in errors about a value that cannot be carried


@dataclass
class ScanResult:
    """What a task sends back: the encoded RECORD lines of its chunk, or the error that stopped it."""

    chunk_index: int
    stream: str
    namespace: str | None
    rows: int = 0
    blobs: list[bytes] = field(default_factory=list)
    error: OlakeError | None = None
    seconds: float = 0.0
    spool_path: str | None = None
    warnings: list[str] = field(default_factory=list)

    def emit(self, write: Callable[[bytes], Any]) -> None:
        """Hand the chunk's lines to ``write`` (from memory or from the spool file, then delete it)."""
        for blob in self.blobs:
            write(blob)
        if self.spool_path:
            with open(self.spool_path, "rb") as spool:
                while block := spool.read(1 << 22):
                    write(block)
            os.remove(self.spool_path)


def read_batches(task: ScanTask) -> Iterator[Any]:
    """Arrow record batches of the chunk, read through ADBC inside the exported snapshot."""
    import adbc_driver_postgresql.dbapi as dbapi

    from olake_cli.sources.postgres.types import SCAN_SESSION_SETTINGS

    with dbapi.connect(task.uri) as conn:
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if task.snapshot_id:
                cur.execute(f"SET TRANSACTION SNAPSHOT '{task.snapshot_id}'")
            for name, value in SCAN_SESSION_SETTINGS.items():
                cur.execute(f"SET {name} = '{value}'")
            cur.execute(task.query)
            reader = cur.fetch_record_batch()
            for batch in reader:
                for start in range(0, batch.num_rows, task.batch_rows):
                    yield batch.slice(start, task.batch_rows)
        conn.rollback()


def run_scan_task(task: ScanTask) -> ScanResult:
    """Scan one chunk and encode it as RECORD lines; errors come back as values, not exceptions."""
    from olake_cli.core.codec import encode_records

    if task.sink is not None:
        return _sink_chunk(task)
    started = time.monotonic()
    result = ScanResult(task.chunk_index, task.stream, task.namespace)
    spool = _open_spool(task, result)
    try:
        for batch in read_batches(task):
            if batch.num_rows == 0:
                continue
            emitted_at = int(time.time() * 1000)
            blob = encode_records(batch, task.json_schema, task.stream, task.namespace, emitted_at,
                                  task.extra_data, task.key_columns)
            spool.write(blob) if spool else result.blobs.append(blob)
            result.rows += batch.num_rows
        if spool:
            spool.close()
    except OlakeError as exc:
        result.error, result.blobs = exc, []
    except Exception as exc:  # driver errors arrive as many types; report them as one SourceError
        message = f"chunk {task.chunk_index} of {task.namespace}.{task.stream}: {type(exc).__name__}: {exc}"
        result.error, result.blobs = SourceError(_scrub(message, task.uri)), []
    if result.error is not None and spool:
        spool.close()
        os.remove(result.spool_path)
        result.spool_path = None
    result.seconds = time.monotonic() - started
    return result


def _sink_chunk(task: ScanTask) -> ScanResult:
    """Scan one chunk and let the destination's sink write it (``olake sync``)."""
    started = time.monotonic()
    result = ScanResult(task.chunk_index, task.stream, task.namespace)
    try:
        batches = [b for b in read_batches(task) if b.num_rows]
        result.rows, result.warnings = task.sink.write(
            task.namespace, task.stream, task.load_id, task.chunk_index, task.snapshot_key,
            task.json_schema, batches, task.key_columns)
    except OlakeError as exc:
        result.error = exc
    except Exception as exc:  # driver errors arrive as many types; report them as one SourceError
        message = f"chunk {task.chunk_index} of {task.namespace}.{task.stream}: {type(exc).__name__}: {exc}"
        result.error = SourceError(_scrub(message, task.uri))
    result.seconds = time.monotonic() - started
    return result


def _open_spool(task: ScanTask, result: ScanResult):
    """A spool file beside the driver (local Spark only): results then skip the JVM round trip."""
    if not task.spool_dir:
        return None
    fd, result.spool_path = tempfile.mkstemp(prefix=f"chunk-{task.chunk_index}-", suffix=".jsonl",
                                             dir=task.spool_dir)
    return os.fdopen(fd, "wb", buffering=1 << 22)


def _scrub(text: str, uri: str) -> str:
    """``text`` without the password that ``uri`` carries."""
    from urllib.parse import unquote, urlparse

    from olake_cli.sources.postgres.connection import scrub

    return scrub(text, unquote(urlparse(uri).password or ""))