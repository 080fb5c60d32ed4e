"""Parquet destination: ``<path>/<namespace>/<stream>/part-*.parquet``, committed with the state.

Rows are buffered per stream and spilled to hidden files; a STATE makes the rows before it live for
the streams it names (deterministic names, a manifest per stream, a symlink swap when a load replaces
another: see manifest.py, commit_plan.py and paths.py). Rows no STATE covers are never made live.
The files go to a local folder or an S3 bucket (``path: s3://bucket/prefix``) through a store
(storage.py: local_store.py, s3_store.py).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import pyarrow as pa

from olake_cli.core import codec, codec_decode, row_metadata
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import DestinationError
from olake_cli.core.resync import lost_load, marker_replacing
from olake_cli.core.state import State, StreamState
from olake_cli.core.load_progress import newly_done_chunks
from olake_cli.destinations.parquet.commit_plan import commit_key, next_manifest
from olake_cli.core.faults import crash_point
from olake_cli.destinations.parquet.local_store import write_staged
from olake_cli.destinations.parquet.manifest import Manifest
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_file_name, commit_file_name
from olake_cli.destinations.parquet.rewrite import converted_by_value, rewrite_load
from olake_cli.destinations.parquet.storage import make_store

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
    """One stream: rows waiting to be written (raw dicts, decoded tables, staged spill files)."""

    stream: CatalogStream
    schema: pa.Schema
    paths: StreamPaths
    manifest: Manifest
    load_id: str = UNKNOWN_LOAD
    rows: list[dict] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)
    table_rows: int = 0
    spills: list[tuple[str, str, str]] = field(default_factory=list)  # (dir id, load id, spill path)
    spill_names: dict[str, str] = field(default_factory=dict)  # spill path -> its name (a rewritten file's)
    truncated_into: str | None = None  # a TRUNCATE was seen: later rows go to this new directory
    warned: set[str] = field(default_factory=set)


class ParquetDestination:
    """Buffers records per stream; each STATE commits the rows before it with a manifest (see manifest.py)."""

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.root = config["path"]
        self.store = make_store(config)
        self.rows_per_file = int(config.get("rows_per_file", 1_000_000))
        compression = config.get("compression", "zstd")
        self.compression = None if compression == "none" else compression
        self.log = log
        self.buffers: dict[tuple, StreamBuffer] = {}
        self.snapshot_keys: dict[tuple, str] = {}  # op id of full-load rows: the snapshot's position
        self.sink = None  # the chunk sink of sync's tasks, told each stream's files as it opens

    def check(self) -> str:
        """The folder (or bucket prefix) exists or can be created, and accepts files."""
        return self.store.check()

    def lock_path(self) -> str:
        """The file runs writing into this destination lock (``core.locks``)."""
        return self.store.lock_path()

    def chunk_sink(self):
        """Spark tasks of ``sync`` write their full-load chunks' files themselves."""
        from olake_cli.destinations.parquet.chunk_sink import ParquetChunkSink

        if self.sink is None:
            self.sink = ParquetChunkSink(self.root, self.compression, self.rows_per_file,
                                         None if self.store.local else self.store.options)
            for key, buf in self.buffers.items():
                self.sink.committed[key] = buf.manifest.listed_files()
                self._tell_sink(key, buf.manifest, buf.load_id)
        return self.sink

    def open(self, catalog: Catalog) -> None:
        """Prepare each stream of the catalog: roll its last commit forward, delete uncommitted files."""
        for stream in catalog.streams:
            if stream.key not in self.buffers:
                paths = self.stream_paths(stream)
                manifest = self.store.load_manifest(paths) or Manifest()
                self.store.roll_forward(paths, manifest, delete=manifest.retired)
                if self.store.remove_unlisted(paths, manifest):
                    self.log(f"{stream.label}: removed files no commit made live (an interrupted run)")
                buf = StreamBuffer(stream, destination_schema(stream), paths, manifest)
                committed = manifest.state or {}
                buf.load_id = (committed.get("stream_state") or {}).get("load_id") or UNKNOWN_LOAD
                self.buffers[stream.key] = buf
                if self.sink is not None:  # what the tasks must not write again (a replay after a kill)
                    self.sink.committed[stream.key] = manifest.listed_files()
                    self._tell_sink(stream.key, manifest, buf.load_id)

    def stream_paths(self, stream: CatalogStream) -> StreamPaths:
        """Where one stream's files and manifest live."""
        return StreamPaths.of(self.store.root, stream.namespace, stream.name)

    def committed_state(self, stream: CatalogStream) -> dict | None:
        """The stream state last committed with the stream's files (its manifest), or None."""
        manifest = self.store.load_manifest(self.stream_paths(stream))
        return None if manifest is None else manifest.state

    def stream_dir(self, stream: CatalogStream) -> str:
        """The documented folder of one stream (``<path>/<namespace>/<stream>``)."""
        return self.store.describe(self.stream_paths(stream).link)

    def add(self, key: tuple, data: dict) -> None:
        """Buffer one record's data (a truncate record drops what came before it in this commit)."""
        buf = self.buffers[key]
        if data.get("_olake_op") == "t":
            self._truncate(buf)
            return
        buf.rows.append(data)
        if len(buf.rows) >= min(DECODE_EVERY, self.rows_per_file):
            self._decode(buf)
            if buf.table_rows >= self.rows_per_file:
                self._spill(buf, whole_files_only=True)

    def add_table(self, key: tuple, table: pa.Table, warnings: list[str]) -> None:
        """Buffer rows already decoded to the stream's destination types, then their _olake_* columns
        (``record_block``; no truncate among them)."""
        buf = self.buffers[key]
        self._decode(buf)  # records added one by one before these keep their place
        self._warn(buf, warnings)
        metadata = row_metadata.of_block(table, self.snapshot_keys.get(buf.stream.key))
        table = append_metadata(table.drop_columns(list(row_metadata.WIRE_NAMES)), metadata,
                                buf.stream.json_schema)
        buf.tables.append(conform(table, buf.schema, buf.stream.label))
        buf.table_rows += table.num_rows
        if buf.table_rows >= self.rows_per_file:
            self._spill(buf, whole_files_only=True)

    def widen(self, stream: CatalogStream) -> None:
        """Later rows of ``stream`` use its new (widened) schema; buffered rows are written first, and
        the load's files are rewritten when a column's type changes by value (see rewrite.py)."""
        buf = self.buffers[stream.key]
        self._spill(buf)
        schema = destination_schema(stream)
        converted = converted_by_value(buf.schema, schema)
        if converted:
            rewrite_load(self.store, buf, schema, self.compression, conform)
            self.log(f"{stream.label}: column(s) {', '.join(converted)} change type by value: the load's files "
                     f"are rewritten with the new type(s), live at the next commit")
        buf.stream, buf.schema = stream, schema

    def observe_state(self, state: State) -> None:
        """Track which full load each stream's next records belong to (called before records follow)."""
        for ss in state.streams:
            buf = self.buffers.get(ss.key)
            load_id = (ss.extra or {}).get("load_id")
            if buf is not None and load_id and load_id != buf.load_id:
                self._spill(buf)  # rows of the earlier load stay with that load
                buf.load_id = load_id
            if (ss.extra or {}).get("load_op_key"):
                self.snapshot_keys[ss.key] = ss.extra["load_op_key"]

    def commit(self, state: State) -> State:
        """Make the rows before ``state`` of each stream it names live, together with that state; returns
        ``state``, or a copy in which a stream whose files lost its load is a re-sync marker."""
        streams = []
        for ss in state.streams:
            buf = self.buffers.get(ss.key)
            streams.append(ss if buf is None else self._commit_stream(buf, ss))
        if any(new is not old for new, old in zip(streams, state.streams)):
            state = State(state.level, state.version, streams)
        self.observe_state(state)
        return state

    def has_uncommitted(self) -> bool:
        """Whether rows arrived that no STATE has covered yet (they are never made live)."""
        return any(b.rows or b.table_rows or b.spills for b in self.buffers.values())

    def _commit_stream(self, buf: StreamBuffer, ss: StreamState) -> StreamState:
        """Commit ``buf``'s rows with ``ss``; returns the stream state committed (a re-sync marker, its
        rows dropped, when the manifest holds none of the load ``ss`` continues)."""
        lost = lost_load(ss, buf.manifest.state)
        if lost is not None:
            self._discard(buf)
            ss = marker_replacing(ss)
            if ss.to_dict() != buf.manifest.state:
                self.log(f"{buf.stream.label}: {lost}; the stream is loaded anew on the next run")
        self._spill(buf)
        load_id = (ss.extra or {}).get("load_id") or buf.load_id
        done = newly_done_chunks(buf.manifest.state, ss, load_id)
        files = self._name_spills(buf, commit_key(ss), done[0] if len(done) == 1 else None, load_id)
        task_dir = buf.manifest.dir_of(load_id) or load_id  # where the tasks were told to write
        for index in done:  # files the Spark tasks of ``olake sync`` staged for these chunks
            names = files.setdefault((task_dir, load_id), [])
            names += [n for n in self.store.chunk_files(buf.paths, task_dir, load_id, index) if n not in names]
        crash_point("staged")
        manifest = next_manifest(buf.manifest, ss, load_id, files, buf.truncated_into)
        self.store.save_manifest(buf.paths, manifest)
        self.store.roll_forward(buf.paths, manifest, delete=buf.manifest.retired)
        buf.manifest, buf.spills, buf.spill_names, buf.truncated_into = manifest, [], {}, None
        self._tell_sink(buf.stream.key, manifest, load_id)
        return ss

    def _tell_sink(self, key: tuple, manifest: Manifest, load_id: str) -> None:
        """Tell the tasks of ``olake sync`` which directory a stream's load has, when not its own id (its
        files were rewritten, see rewrite.py)."""
        dir_id = manifest.dir_of(load_id)
        if self.sink is not None and dir_id not in (None, load_id):
            self.sink.dirs[key] = (load_id, dir_id)

    def _name_spills(self, buf: StreamBuffer, key: str, chunk: int | None,
                     load_id: str) -> dict[tuple[str, str], list[str]]:
        """Give this commit's spill files their deterministic names; (dir id, load id) -> names.

        Rows of the chunk this STATE marks done are named by that chunk, any others by ``key``.
        """
        files: dict[tuple[str, str], list[str]] = {}
        for dir_id, file_load, spill in buf.spills:
            names = files.setdefault((dir_id, file_load), [])
            if spill in buf.spill_names:
                name = buf.spill_names[spill]
            elif chunk is not None and file_load == load_id:
                name = chunk_file_name(load_id, chunk, len(names))
            else:
                name = commit_file_name(file_load, key, len(names))
            self.store.place_spill(spill, buf.paths, dir_id, name)
            names.append(name)
        return files

    def _decode(self, buf: StreamBuffer) -> None:
        if not buf.rows:
            return
        table, warnings = codec_decode.decode_rows(buf.rows, buf.stream.json_schema, all_nullable=True,
                                            stream=buf.stream.label,
                                            key_columns=tuple(buf.stream.primary_key_columns))
        self._warn(buf, warnings)
        table = append_metadata(table, row_metadata.of_rows(buf.rows, self.snapshot_keys.get(buf.stream.key)),
                                buf.stream.json_schema)
        buf.tables.append(conform(table, buf.schema, buf.stream.label))
        buf.table_rows += table.num_rows
        buf.rows = []

    @staticmethod
    def _discard(buf: StreamBuffer) -> None:
        """Drop every row buffered since the last commit (and the spill files holding some)."""
        buf.rows, buf.tables, buf.table_rows = [], [], 0
        for _, _, path in buf.spills:
            os.remove(path)
        buf.spills, buf.spill_names, buf.truncated_into = [], {}, None

    def _warn(self, buf: StreamBuffer, warnings: list[str]) -> None:
        for warning in warnings:
            if warning not in buf.warned:
                buf.warned.add(warning)
                self.log(f"{buf.stream.namespace}.{buf.stream.name}: {warning}")

    def _spill(self, buf: StreamBuffer, whole_files_only: bool = False) -> None:
        """Write the decoded rows to hidden files of at most ``rows_per_file`` rows in the directory
        they belong to (not yet live); ``whole_files_only`` keeps a last, smaller part buffered."""
        self._decode(buf)
        if not buf.table_rows:
            return
        dir_id = buf.truncated_into or buf.manifest.dir_of(buf.load_id) or buf.load_id
        folder = self.store.spill_folder(buf.paths, dir_id)
        parts = file_parts(pa.concat_tables(buf.tables), self.rows_per_file)
        kept = parts.pop() if whole_files_only and parts[-1].num_rows < self.rows_per_file else None
        for part in parts:
            path = write_staged(folder, f"_spill-{uuid.uuid4().hex}.parquet", part, self.compression)
            buf.spills.append((dir_id, buf.load_id, path))
        buf.tables, buf.table_rows = ([kept], kept.num_rows) if kept is not None else ([], 0)

    def _truncate(self, buf: StreamBuffer) -> None:
        """The source table was truncated: at the next commit the stream's earlier files stop being live."""
        self._discard(buf)
        buf.truncated_into = f"{buf.load_id}.t{buf.manifest.commit + 1}"
        self.log(f"{buf.stream.label}: truncated at the source; the stream is emptied at the next commit")


def destination_schema(stream: CatalogStream) -> pa.Schema:
    """The Arrow schema of a stream's files: its columns (NOT NULL kept, see ``codec.stored_schema``),
    then the _olake_* columns."""
    return file_schema(stream.json_schema, stream.primary_key_columns, stream.sync_mode == "cdc")


def file_schema(json_schema: dict, key_columns: tuple | list, with_changes: bool) -> pa.Schema:
    """The Arrow schema of the files of a stream with this schema and key (``destination_schema``)."""
    columns = codec.stored_schema(json_schema, key_columns, with_changes)
    return pa.schema(list(columns) + metadata_fields(json_schema))


def metadata_fields(json_schema: dict) -> list[pa.Field]:
    """The _olake_* columns of a stream's files (``_olake_toast_unchanged`` only where updates can
    leave values out, see ``row_metadata.carries_unchanged``)."""
    return METADATA_FIELDS if row_metadata.carries_unchanged(json_schema) else METADATA_FIELDS[:-1]


def conform(table: pa.Table, schema: pa.Schema, label: str) -> pa.Table:
    """``table`` in a stream's file ``schema``; a null in a NOT NULL column names the column."""
    for column in schema:
        if not column.nullable and table.column(column.name).null_count:
            raise DestinationError(f"stream {label!r}, column {column.name!r}: a null value, but the catalog "
                                   f"says the column is NOT NULL (run discover again if it changed)")
    return table.cast(schema)


def file_parts(table: pa.Table, rows_per_file: int) -> list[pa.Table]:
    """``table`` cut into consecutive pieces of at most ``rows_per_file`` rows (one file each)."""
    return [table.slice(start, rows_per_file) for start in range(0, table.num_rows, rows_per_file)]


def append_metadata(table: pa.Table, metadata: row_metadata.RowMetadata, json_schema: dict) -> pa.Table:
    """``table`` with the stream's _olake_* columns appended (full-load rows rank at their snapshot's
    position)."""
    for meta, column in zip(metadata_fields(json_schema), metadata.columns(int(time.time() * 1_000_000))):
        table = table.append_column(meta, column)
    return table
