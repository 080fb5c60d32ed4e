"""Parquet destination: ``<path>/<namespace>/<stream>/part-*.parquet``, files appear atomically."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from olake_cli.core import codec
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import DestinationError
from olake_cli.core.position import OpId, parse_lsn
from olake_cli.core.state import State

METADATA_FIELDS = [
    pa.field("_olake_op", pa.string(), nullable=False),          # r (full load), c, u, d
    pa.field("_olake_op_id", pa.string()),                        # 32 hex digits: commit LSN, sequence
    pa.field("_olake_commit_ts", pa.timestamp("us", tz="UTC")),   # source commit time (changes only)
    pa.field("_olake_synced_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_olake_toast_unchanged", pa.list_(pa.string())),   # columns whose value did not change
]
DECODE_EVERY = 20_000
UNKNOWN_LOAD = "0"


@dataclass
class StreamBuffer:
    """Rows of one stream waiting to be written: raw dicts, then decoded Arrow tables."""

    stream: CatalogStream
    schema: pa.Schema
    rows: list[dict] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    table_rows: int = 0
    warned: set[str] = field(default_factory=set)


class ParquetDestination:
    """Buffers records per stream and writes exact-typed Parquet files on commit."""

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.root = config["path"]
        self.rows_per_file = int(config.get("rows_per_file", 1_000_000))
        compression = config.get("compression", "zstd")
        self.compression = None if compression == "none" else compression
        self.log = log
        self.buffers: dict[tuple, StreamBuffer] = {}
        self.load_ids: dict[tuple, str] = {}
        self.loads_in_progress: set[tuple] = set()
        self.snapshot_keys: dict[tuple, str] = {}  # op id of full-load rows: the snapshot's position

    def open(self, catalog: Catalog) -> None:
        """Prepare a buffer per stream of the catalog."""
        for stream in catalog.streams:
            if stream.key not in self.buffers:
                data_schema = codec.arrow_schema(stream.json_schema)
                # every data column is nullable here: a delete carries only the key
                schema = pa.schema([f.with_nullable(True) for f in data_schema])
                for meta in METADATA_FIELDS:
                    schema = schema.append(meta)
                self.buffers[stream.key] = StreamBuffer(stream, schema)

    def stream_dir(self, stream: CatalogStream) -> str:
        """The folder holding one stream's files."""
        return os.path.join(self.root, stream.namespace or "default", stream.name)

    def add(self, key: tuple, data: dict) -> None:
        """Buffer one record's data (a truncate record empties the stream first)."""
        buf = self.buffers[key]
        if data.get("_olake_op") == "t":
            self._truncate(buf)
            return
        buf.rows.append(data)
        if len(buf.rows) >= DECODE_EVERY:
            self._decode(buf)
            if buf.table_rows >= self.rows_per_file:
                self._write_file(buf)

    def commit(self) -> None:
        """Make every buffered record durable (written, fsynced, renamed into place)."""
        for buf in self.buffers.values():
            self._flush(buf)

    def _flush(self, buf: StreamBuffer) -> None:
        self._decode(buf)
        if buf.table_rows:
            self._write_file(buf)

    def observe_state(self, state: State) -> None:
        """Track which full load each stream's next records belong to (called before records follow).

        Rows buffered under an earlier load are written under that load's id before switching.
        """
        for ss in state.streams:
            key = (ss.stream_namespace, ss.stream_name)
            load_id = (ss.extra or {}).get("load_id")
            if not load_id:
                continue
            if key in self.buffers and self.load_ids.get(key, load_id) != load_id:
                self._flush(self.buffers[key])
            self.load_ids[key] = load_id
            if (ss.extra or {}).get("snapshot_lsn"):
                self.snapshot_keys[key] = OpId(parse_lsn(ss.extra["snapshot_lsn"]), 0).to_key()
            if ss.chunks:
                self.loads_in_progress.add((key, load_id))

    def after_commit(self, state: State) -> None:
        """Called once ``state`` is committed: a full load seen in progress and now complete replaces
        the files of earlier loads of its stream (so full_refresh and re-syncs do not append)."""
        for ss in state.streams:
            key = (ss.stream_namespace, ss.stream_name)
            load_id = (ss.extra or {}).get("load_id")
            if not ss.chunks and (key, load_id) in self.loads_in_progress and key in self.buffers:
                self.loads_in_progress.discard((key, load_id))
                self._drop_other_loads(self.buffers[key].stream, load_id)

    def _decode(self, buf: StreamBuffer) -> None:
        if not buf.rows:
            return
        table, warnings = codec.decode_rows(buf.rows, buf.stream.json_schema, all_nullable=True)
        for warning in warnings:
            if warning not in buf.warned:
                buf.warned.add(warning)
                self.log(f"{buf.stream.namespace}.{buf.stream.name}: {warning}")
        table = self._with_metadata(table, buf.rows, self.snapshot_keys.get(buf.stream.key))
        buf.tables.append(table)
        buf.table_rows += table.num_rows
        buf.rows = []

    def _with_metadata(self, table: pa.Table, rows: list[dict], snapshot_key: str | None) -> pa.Table:
        """Append the _olake_* columns; full-load rows rank at their snapshot's position."""
        now = int(time.time() * 1_000_000)
        ops = [r.get("_olake_op", "r") for r in rows]
        op_ids = [_format_op_id(r.get("_olake_op_id"), snapshot_key) for r in rows]
        commit_ts = [r.get("_olake_commit_ts") for r in rows]
        unchanged = [r.get("_olake_toast_unchanged") for r in rows]
        return append_metadata(table, ops, op_ids, commit_ts, unchanged, now)

    def _write_file(self, buf: StreamBuffer) -> None:
        table = pa.concat_tables(buf.tables).cast(buf.schema)
        write_parquet_file(self.stream_dir(buf.stream), self.load_ids.get(buf.stream.key, UNKNOWN_LOAD),
                           table, self.compression)
        buf.tables, buf.table_rows = [], 0

    def _truncate(self, buf: StreamBuffer) -> None:
        """The source table was truncated: forget buffered rows and remove the stream's files."""
        buf.rows, buf.tables, buf.table_rows = [], [], 0
        folder = self.stream_dir(buf.stream)
        if os.path.isdir(folder):
            for name in os.listdir(folder):
                if name.startswith("part-") and name.endswith(".parquet"):
                    os.remove(os.path.join(folder, name))
            _fsync(folder)
        self.log(f"{buf.stream.label}: truncated at the source; its files were removed")

    def _drop_other_loads(self, stream: CatalogStream, load_id: str) -> None:
        folder = self.stream_dir(stream)
        if not os.path.isdir(folder):
            return
        stale = [n for n in os.listdir(folder)
                 if n.startswith("part-") and n.endswith(".parquet") and not n.startswith(f"part-{load_id}-")]
        for name in stale:
            os.remove(os.path.join(folder, name))
        if stale:
            _fsync(folder)
            self.log(f"{stream.namespace}.{stream.name}: full load {load_id} complete; "
                     f"removed {len(stale)} file(s) of earlier loads")


def append_metadata(table: pa.Table, ops: list, op_ids: list, commit_ts: list, unchanged: list,
                    synced_at_us: int) -> pa.Table:
    """``table`` with the _olake_* columns appended (one value per row in each list)."""
    columns = [pa.array(ops, pa.string()), pa.array(op_ids, pa.string()),
               pa.array(commit_ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
               pa.array([synced_at_us] * table.num_rows, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
               pa.array(unchanged, pa.list_(pa.string()))]
    for meta, column in zip(METADATA_FIELDS, columns):
        table = table.append_column(meta, column)
    return table


def write_parquet_file(folder: str, load_id: str, table: pa.Table, compression: str | None) -> str:
    """Write ``table`` as a new file of load ``load_id``: temp name, fsync, rename, fsync the folder."""
    os.makedirs(folder, exist_ok=True)
    name = f"part-{load_id}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}.parquet"
    tmp = os.path.join(folder, f".{name}.tmp")
    try:
        pq.write_table(table, tmp, compression=compression)
        _fsync(tmp)
        os.replace(tmp, os.path.join(folder, name))
        _fsync(folder)
    except OSError as exc:
        raise DestinationError(f"parquet: cannot write {folder}: {exc.strerror or exc}") from None
    return os.path.join(folder, name)


def _format_op_id(op_id: Any, default: str | None) -> str | None:
    """32 hex digits (text order = operation order); ``default`` for rows without one."""
    if op_id is None:
        return default
    if type(op_id) is list and len(op_id) == 2:
        return f"{op_id[0]:016X}{op_id[1]:016X}"
    return str(op_id)


def _fsync(path: str) -> None:
    """fsync a file or a directory (so a rename inside it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
