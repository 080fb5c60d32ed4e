"""Parquet destination: ``<path>/<namespace>/<stream>/part-*.parquet``, committed with the state.

Rows the pipeline's stream buffer puts ahead of their commit are spilled to hidden files; a commit makes
the rows before a STATE live for the streams it names (deterministic names, a manifest per stream, a
symlink swap when a load replaces another: see manifest.py, commit_plan.py and paths.py). Rows no
STATE covers are never made live. Changes are appended as rows (``_olake_op`` and ``_olake_op_id``
say which version of a key is the newest); the destination keeps no watermark: a replay rewrites the
same file names. The files go to a local folder or an S3 bucket (``path: s3://bucket/prefix``) through
a store (storage.py: local_store.py, s3_store.py). After a commit, a stream's small files are merged
into one when there are too many (small_files.py).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import pyarrow as pa

from olake_cli.core import row_metadata
from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.core.faults import crash_point
from olake_cli.core.load_progress import UNKNOWN_LOAD
from olake_cli.destinations.parquet.commit_plan import commit_key, next_manifest
from olake_cli.destinations.parquet.file_schema import conform, destination_schema, file_parts
from olake_cli.destinations.parquet.local_store import write_staged
from olake_cli.destinations.parquet.manifest import Manifest
from olake_cli.destinations.parquet.paths import StreamPaths, chunk_file_name, commit_file_name
from olake_cli.destinations.parquet.rewrite import converted_by_value, rewrite_load
from olake_cli.destinations.parquet.small_files import MAX_SMALL_FILES, SmallFileMerger
from olake_cli.destinations.parquet.storage import Store, make_store


@dataclass
class ParquetStream:
    """One stream of the destination: its manifest, and the spill files of rows put ahead of their commit."""

    stream: CatalogStream
    schema: pa.Schema
    paths: StreamPaths
    manifest: Manifest
    store: Store
    spill_rows: int  # rows_per_file
    compression: str | None
    load_id: str = UNKNOWN_LOAD  # the load of the latest rows put or committed
    spills: list[tuple[str, str, str]] = field(default_factory=list)  # (dir id, load id, spill path)
    spill_names: dict[str, str] = field(default_factory=dict)  # spill path -> its name (a rewritten file's)
    load_spills: set[str] = field(default_factory=set)  # the spill paths holding full-load rows
    truncated_into: str | None = None  # a TRUNCATE (or a rewrite) was seen: later rows go to this new directory
    watermark: str | None = None  # none kept: a replay rewrites the same file names
    holder: str = "the destination"

    @property
    def committed(self) -> dict | None:
        """The stream state the manifest holds."""
        return self.manifest.state

    def put_load(self, table: pa.Table, load_id: str) -> None:
        """Spill full-load rows of load ``load_id`` (not yet live)."""
        self.load_spills.update(self.spill(table, load_id))

    def put_changes(self, table: pa.Table, load_id: str) -> None:
        """Spill changes (appended as rows; not yet live)."""
        self.spill(table, load_id)

    def discard(self, load_id: str, truncated: bool) -> None:
        """Drop every spill since the last commit; after a TRUNCATE (``truncated``) later rows go to a new
        directory that replaces the load's at the next commit."""
        self.drop_spills(self.spills)
        self.spill_names, self.load_id = {}, load_id
        self.truncated_into = f"{load_id}.t{self.manifest.commit + 1}" if truncated else None

    def spill(self, table: pa.Table, load_id: str) -> list[str]:
        """Write rows to hidden files of at most ``spill_rows`` rows in the directory they belong to;
        the files' paths."""
        if not row_metadata.carries_unchanged(self.stream.json_schema):
            table = table.drop_columns([row_metadata.TOAST])
        table = conform(table, self.schema, self.stream.label)
        self.load_id = load_id
        dir_id = self.truncated_into or self.manifest.dir_of(load_id) or load_id
        folder = self.store.spill_folder(self.paths, dir_id)
        paths = [write_staged(folder, f"_spill-{uuid.uuid4().hex}.parquet", part, self.compression)
                 for part in file_parts(table, self.spill_rows)]
        self.spills += [(dir_id, load_id, path) for path in paths]
        return paths

    def drop_spills(self, spills: list[tuple[str, str, str]]) -> None:
        """Delete ``spills`` (of this commit's) and forget them."""
        for _, _, path in spills:
            os.remove(path)
            self.load_spills.discard(path)
            self.spill_names.pop(path, None)
        self.spills = [s for s in self.spills if s not in spills]

    def name_spills(self, key: str, chunk: int | None, load_id: str) -> dict[tuple[str, str], list[str]]:
        """Give this commit's spill files their deterministic names; (dir id, load id) -> names.

        Rows of the chunk this STATE marks done are named by that chunk, any others by ``key``.
        """
        files: dict[tuple[str, str], list[str]] = {}
        for dir_id, file_load, spill in self.spills:
            names = files.setdefault((dir_id, file_load), [])
            if spill in self.spill_names:
                name = self.spill_names[spill]
            elif chunk is not None and file_load == load_id:
                name = chunk_file_name(load_id, chunk, len(names))
            else:
                name = commit_file_name(file_load, key, len(names))
            self.store.place_spill(spill, self.paths, dir_id, name)
            names.append(name)
        return files


class ParquetDestination:
    """Each STATE commits the rows before it with a manifest per stream (see manifest.py)."""

    follow_commit_interval_s = 30.0  # --follow's default cadence: each commit writes new files and the manifest

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.root = config["path"]
        self.store = make_store(config)
        self.rows_per_file = int(config.get("rows_per_file", 1_000_000))
        compression = config.get("compression", "zstd")
        self.compression = None if compression == "none" else compression
        self.log = log
        self.merger = SmallFileMerger(self.store, int(config.get("max_small_files", MAX_SMALL_FILES)),
                                      self.rows_per_file, self.compression, log)
        self.streams: dict[tuple, ParquetStream] = {}
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
            for key, target in self.streams.items():
                self.sink.committed[key] = target.manifest.listed_files()
                self._tell_sink(target)
        return self.sink

    def open(self, catalog: Catalog) -> None:
        """Prepare each stream of the catalog: roll its last commit forward, delete uncommitted files."""
        for stream in catalog.streams:
            if stream.key not in self.streams:
                paths = self.stream_paths(stream)
                manifest = self.store.load_manifest(paths) or Manifest()
                self.store.roll_forward(paths, manifest, previous=manifest)
                if self.store.remove_unlisted(paths, manifest):
                    self.log(f"{stream.label}: removed files no commit made live (an interrupted run)")
                target = ParquetStream(stream, destination_schema(stream), paths, manifest, self.store,
                                       self.rows_per_file, self.compression)
                target.load_id = ((manifest.state or {}).get("stream_state") or {}).get("load_id") or UNKNOWN_LOAD
                self.streams[stream.key] = target
                if self.sink is not None:  # what the tasks must not write again (a replay after a kill)
                    self.sink.committed[stream.key] = manifest.listed_files()
                    self._tell_sink(target)

    def stream_target(self, key: tuple) -> ParquetStream | None:
        """An opened stream."""
        return self.streams.get(key)

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

    def widen(self, stream: CatalogStream) -> None:
        """Later rows of ``stream`` use its new (widened) schema (the stream buffer spilled the rows it held
        first); the load's files are rewritten when a column's type changes by value (see rewrite.py)."""
        target = self.streams[stream.key]
        schema = destination_schema(stream)
        converted = converted_by_value(target.schema, schema)
        if converted:
            rewrite_load(self.store, target, schema, self.compression, conform)
            self.log(f"{stream.label}: column(s) {', '.join(converted)} change type by value: the load's files "
                     f"are rewritten with the new type(s), live at the next commit")
        target.stream, target.schema = stream, schema

    def commit(self, batches: list[CommitBatch]) -> None:
        """Make each batch's rows live with its stream state (a manifest per stream)."""
        for batch in batches:
            self._commit_stream(self.streams[batch.state.key], batch)

    def _commit_stream(self, target: ParquetStream, batch: CommitBatch) -> None:
        """Spill the batch's rows, name this commit's files, and replace the stream's manifest."""
        if batch.load_replayed:
            target.drop_spills([s for s in target.spills if s[2] in target.load_spills])
        for rows in (batch.load, batch.changes):
            if rows is not None:
                target.spill(rows, batch.load_id)
        load_id, done = batch.load_id, batch.newly_done
        files = target.name_spills(commit_key(batch.state), done[0] if len(done) == 1 else None, load_id)
        task_dir = target.manifest.dir_of(load_id) or load_id  # where the tasks were told to write
        for index in done:  # files the Spark tasks of ``olake sync`` staged for these chunks
            names = files.setdefault((task_dir, load_id), [])
            names += [n for n in self.store.chunk_files(target.paths, task_dir, load_id, index) if n not in names]
        crash_point("staged")
        manifest = next_manifest(target.manifest, batch.state, batch.merged, load_id, files, target.truncated_into)
        self.store.save_manifest(target.paths, manifest)
        self.store.roll_forward(target.paths, manifest, previous=target.manifest)
        target.manifest, target.spills, target.spill_names, target.truncated_into = manifest, [], {}, None
        target.load_spills.clear()
        target.load_id = load_id
        newest = {name for names in files.values() for name in names}
        target.manifest = self.merger.merge(target.stream.label, target.paths, manifest, newest) or manifest
        self._tell_sink(target)

    def _tell_sink(self, target: ParquetStream) -> None:
        """Tell the tasks of ``olake sync`` which directory a stream's load has, when not its own id (its
        files were rewritten, see rewrite.py)."""
        dir_id = target.manifest.dir_of(target.load_id)
        if self.sink is not None and dir_id not in (None, target.load_id):
            self.sink.dirs[target.stream.key] = (target.load_id, dir_id)
