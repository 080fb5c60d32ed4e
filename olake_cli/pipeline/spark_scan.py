"""olake's sources behind the Spark data source: options, the stream's schema, and batch reads.

A batch read is planned by a keeper process (``spark_keeper``) that opens the source's read session
(for PostgreSQL: the exported snapshot every chunk reads under), plans the stream's full load with
the same planners as ``sync``, hands the picklable chunk readers back and keeps the session open
until every partition has read its chunk. Rows reach Spark in the destinations' Arrow types
(``core.codec.scanned``) with the ``_olake_*`` change columns of a stream read.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any
from collections.abc import Iterator

import pyarrow as pa

from olake_cli.core.catalog import CatalogStream, parse_catalog
from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.codec.types import arrow_schema
from olake_cli.core.config import load_config
from olake_cli.core.contracts import ResumableReader, WireColumnsReader
from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.core.registry import make_source

KNOWN_OPTIONS = {"config": "a source config file (required)",
                 "stream": "the stream, namespace.name (required)",
                 "driver_host": "the address the executors reach this machine at (batch reads; default 127.0.0.1)",
                 "snapshot_idle_s": "seconds a read's snapshot stays open while no chunk reports (600)",
                 "max_rows_per_batch": "at most about this many changes in one micro-batch (streams)"}
STREAM_FIELDS = [pa.field("_olake_op", pa.string()), pa.field("_olake_op_id", pa.string()),
                 pa.field("_olake_commit_ts", pa.timestamp("us", tz="UTC")),
                 pa.field("_olake_toast_unchanged", pa.list_(pa.string()))]
FORMAT = 'spark.read.format("olake")'


@dataclass(frozen=True)
class ReadOptions:
    """The options of a read, checked."""

    config: str
    stream: str
    driver_host: str = "127.0.0.1"
    snapshot_idle_s: float = 600.0
    max_rows_per_batch: int | None = None
    streaming: bool = False  # the load a stream starts with: its change capture's position comes first


def read_options(options: dict[str, str]) -> ReadOptions:
    """Checked options: a missing or unknown one is a ConfigError naming the known ones."""
    options = {k.lower(): v for k, v in options.items() if k.lower() != "path"}
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise ConfigError(f"{FORMAT}: unknown option(s) {', '.join(unknown)} (known: {', '.join(KNOWN_OPTIONS)})")
    for name in ("config", "stream"):
        if not options.get(name):
            raise ConfigError(f"{FORMAT}: option '{name}' is required ({KNOWN_OPTIONS[name]})")
    idle = _number(options, "snapshot_idle_s", float, 600.0)
    most = _number(options, "max_rows_per_batch", int, None)
    return ReadOptions(options["config"], options["stream"], options.get("driver_host", "127.0.0.1"), idle, most)


def _number(options: dict[str, str], name: str, kind: type, default: Any) -> Any:
    """A positive number option (``default`` when not given), or a ConfigError naming it."""
    if name not in options:
        return default
    try:
        value = kind(options[name])
    except ValueError:
        value = 0
    if not value > 0:
        raise ConfigError(f"{FORMAT}: option '{name}' must be a positive {'integer' if kind is int else 'number'} "
                          f"(got {options[name]!r})")
    return value


def open_stream(opts: ReadOptions) -> tuple[Any, CatalogStream, dict]:
    """(source, the discovered stream, the config) of a read; an unknown stream is a ConfigError."""
    _, kind, config = load_config(opts.config, role="source")
    source = make_source(kind, config)
    catalog = parse_catalog(source.discover(), what=f"{opts.config}: discover")
    found = [s for s in catalog.streams if opts.stream in (s.label, s.name)]
    if len(found) != 1:
        labels = sorted(s.label for s in catalog.streams)
        shown = ", ".join(labels[:20]) + (f" and {len(labels) - 20} more" if len(labels) > 20 else "")
        what = "is ambiguous (name it namespace.name)" if found else "is not in the source"
        raise ConfigError(f"{FORMAT}: stream '{opts.stream}' {what}; its streams: {shown or 'none'}")
    return source, found[0], config


def stream_schema(stream: CatalogStream) -> pa.Schema:
    """The stream's columns in destination types (all nullable) and the ``_olake_*`` columns."""
    fields = [f.with_nullable(True) for f in arrow_schema(stream.json_schema)]
    return pa.schema(fields + STREAM_FIELDS)


def destination_rows(batch: pa.RecordBatch, reader: Any, json_schema: dict, label: str,
                     key_columns: tuple[str, ...], op_key: str | None = None) -> pa.Table:
    """A scanned batch in destination types, as full-load rows (``_olake_op`` 'r', ranking at ``op_key``)."""
    wire = reader.wire_columns(batch) if isinstance(reader, WireColumnsReader) else None
    table, _ = to_destination(batch, json_schema, label, key_columns, wire)
    rows = table.num_rows
    return table.append_column(STREAM_FIELDS[0], pa.array(["r"] * rows, pa.string())) \
        .append_column(STREAM_FIELDS[1], pa.array([op_key] * rows, pa.string())) \
        .append_column(STREAM_FIELDS[2], pa.nulls(rows, STREAM_FIELDS[2].type)) \
        .append_column(STREAM_FIELDS[3], pa.nulls(rows, STREAM_FIELDS[3].type))


@dataclass(frozen=True)
class ChunkPartition:
    """One planned chunk: its index and picklable reader (``op_key``: where a stream's load ranks)."""

    index: int
    reader: Any
    op_key: str | None = None


@dataclass
class OlakeBatchScan:
    """A planned batch read (picklable): the chunks' readers and the keeper holding their session."""

    label: str
    json_schema: dict
    key_columns: tuple[str, ...]
    chunks: list[ChunkPartition]
    keeper: tuple[str, int, str]  # host, port, token

    def partitions(self) -> list[ChunkPartition]:
        """One partition per chunk."""
        return list(self.chunks)

    def read(self, partition: ChunkPartition) -> Iterator[pa.Table]:
        """The chunk's rows; the keeper is told when it starts and ends (it then releases the session)."""
        try:
            _exchange(self.keeper, ("start", partition.index, None))
        except OSError as exc:
            raise SourceError(f"{FORMAT}: {self.label}: chunk {partition.index} cannot reach the process holding the "
                              f"read's snapshot at {self.keeper[0]}:{self.keeper[1]} ({exc}): it let go after "
                              "snapshot_idle_s without a chunk reading (run the action again), or the executors "
                              "do not reach that address (set the option driver_host)") from None
        reader, finished = partition.reader, False
        try:
            while True:
                for batch in reader.read_batches():
                    tell_keeper(self.keeper, "alive", partition.index)  # a reader holds the snapshot
                    if batch.num_rows:
                        yield destination_rows(batch, reader, self.json_schema, self.label, self.key_columns,
                                               partition.op_key)
                resume = reader.resume_point() if isinstance(reader, ResumableReader) else None
                if resume is None:
                    break
                reader = ask_keeper(self.keeper, "rest", partition.index, resume)
            finished = True
        finally:
            tell_keeper(self.keeper, "done" if finished else "fail", partition.index)


def start_keeper(opts: ReadOptions) -> tuple[OlakeBatchScan, dict | None]:
    """Start ``spark_keeper`` for a read and take its plan and, for a stream, the state after the load
    (or raise its error)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "olake_cli.pipeline.spark_keeper"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env, start_new_session=True)
    proc.stdin.write(pickle.dumps(opts))
    proc.stdin.close()
    answer = proc.stdout.read()
    proc.stdout.close()
    threading.Thread(target=proc.wait, daemon=True).start()  # reaped when it releases the session
    if not answer:
        raise SourceError(f"{FORMAT}: the process planning the read of '{opts.stream}' ended without a plan "
                          f"(exit code {proc.poll()}); see the Spark driver's log")
    result = pickle.loads(answer)
    if isinstance(result, BaseException):
        raise result
    return result


def tell_keeper(keeper: tuple[str, int, str], what: str, index: int) -> None:
    """Say a partition is reading, finished or failed; a keeper gone is said by the next chunk's start."""
    try:
        _exchange(keeper, (what, index, None))
    except OSError:
        pass


def ask_keeper(keeper: tuple[str, int, str], what: str, index: int, arg: Any) -> Any:
    """A reader the keeper makes in its session (the rest of a chunk that stopped early)."""
    try:
        answer = _exchange(keeper, (what, index, arg))
    except OSError as exc:
        raise SourceError(f"{FORMAT}: the read's session was released before chunk {index} ended ({exc}); "
                          "run the action again") from None
    if isinstance(answer, BaseException):
        raise answer
    return answer


def _exchange(keeper: tuple[str, int, str], message: tuple) -> Any:
    host, port, token = keeper
    with socket.create_connection((host, port), timeout=60) as conn:
        conn.sendall(json.dumps([token, *message]).encode())
        conn.shutdown(socket.SHUT_WR)
        data = b"".join(iter(lambda: conn.recv(65536), b""))
    return pickle.loads(data) if data else None
