"""Iceberg destination: one table per stream, each STATE committed with its rows in one transaction.

Tables are ``<namespace>.<stream>`` (or the configured namespace and ``table_prefix``), created from
the catalog schema (see schema.py) in the configured catalog (embedded SQLite by default, see
config.py). Keyed ``incremental`` and ``cdc`` streams hold exactly the current version of every
source row: changes are merged with position deletes (merge.py, lookup.py, snapshot.py); full loads
are appended, and a load that replaces earlier contents is staged and swapped in by one commit
(commit.py). The state each commit covers lives in the table's properties, so ``state recover``
reads it back from the table.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pyarrow as pa

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import ConfigError, DestinationError, OlakeError
from olake_cli.core.state import State, StreamState
from olake_cli.destinations.iceberg.buffer import DECODE_EVERY, StreamBuffer
from olake_cli.destinations.iceberg.chunk_sink import IcebergChunkSink, SinkTable
from olake_cli.destinations.iceberg.commit import CommitOptions, commit_stream
from olake_cli.destinations.iceberg.config import (lock_path, open_catalog, parse_config, prepare_embedded,
                                                    probe_warehouse, redact)
from olake_cli.destinations.iceberg.files import write_rows
from olake_cli.destinations.iceberg.merge import TOAST
from olake_cli.destinations.iceberg.retype import replace_now, replaced_columns, replacement
from olake_cli.destinations.iceberg.rewrite import converts
from olake_cli.destinations.iceberg.tables import (check_table, create_table, evolve_table, has_rows, load_table,
                                                   olake_properties)


class IcebergDestination:
    """Buffers records per stream; each STATE commits the rows before it with that state."""

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.cfg = parse_config(config)
        self.log = log
        self._catalog: Any = None
        self.buffers: dict[tuple, StreamBuffer] = {}
        self.sink: IcebergChunkSink | None = None
        self.options = CommitOptions(self.cfg.soft_delete, self.cfg.compression, log)

    @property
    def catalog(self) -> Any:
        """The pyiceberg catalog, opened on first use."""
        if self._catalog is None:
            self._catalog = open_catalog(self.cfg)
        return self._catalog

    def check(self) -> str:
        """The catalog can be reached and (for a local warehouse) written."""
        if self.cfg.embedded_dir is not None:
            prepare_embedded(self.cfg.embedded_dir)
        try:
            self.catalog.list_namespaces()
        except ConfigError:
            raise
        except Exception as exc:  # network, credentials, ...
            raise ConfigError(f"iceberg: cannot reach the {self.cfg.describe()}: "
                              f"{redact(str(exc), self.cfg)}") from None
        warehouse = self.cfg.catalog_properties.get("warehouse", "")
        if self.cfg.embedded_dir is None and warehouse.startswith(("file:", "/")):
            prepare_embedded(warehouse.removeprefix("file://"))
        elif "://" in warehouse:
            probe_warehouse(self.cfg, warehouse)
        return f"iceberg: the {self.cfg.describe()} is reachable"

    def lock_path(self) -> str:
        """The file runs writing into this catalog lock (see ``config.lock_path``)."""
        return lock_path(self.cfg)

    def chunk_sink(self) -> IcebergChunkSink:
        """Spark tasks of ``sync`` write their full-load chunks as data files themselves."""
        if self.sink is None:
            self.sink = IcebergChunkSink(dict(self.cfg.catalog_properties), self.cfg.compression)
            self.options.sink_files = True
        return self.sink

    def open(self, catalog: Catalog) -> None:
        """Create or check every selected stream's table (all are checked before any is changed)."""
        streams = [s for s in catalog.selected_streams() if s.key not in self.buffers]
        found = {}
        for stream in streams:
            identifier = self.cfg.table_identifier(stream.namespace, stream.name)
            table = load_table(self.catalog, identifier)
            replaced = [] if table is None else replaced_columns(table, stream)
            found[stream.key] = (identifier, table, replaced, check_table(table, stream, replaced))
        for stream in streams:
            identifier, table, replaced, needs_evolution = found[stream.key]
            if table is None:
                table = create_table(self.catalog, self.cfg, identifier, stream)
                self.log(f"{stream.label}: created Iceberg table {'.'.join(identifier)}")
            elif needs_evolution:
                table = evolve_table(table, stream, replaced)
                self.log(f"{stream.label}: table {'.'.join(identifier)} gained or widened columns")
            self._adopt_table(stream, identifier, table)
            self._replace_columns(self.buffers[stream.key], replaced)

    def _replace_columns(self, buf: StreamBuffer, replaced: list[str]) -> None:
        """Columns whose type Iceberg cannot promote take the stream's type: in the next commit, which
        converts the table's rows, when their values convert (see rewrite.py); else at once in an empty
        table, or in the commit that swaps the stream's new load in (see retype.py)."""
        if not replaced:
            return
        pending = replacement(buf.table, buf.stream, replaced)
        if converts(buf.table, buf.stream, replaced):
            buf.replacement, buf.rewrite = pending, True
            self.log(f"{buf.stream.label}: column(s) {', '.join(replaced)} change type in place: the next commit "
                     f"rewrites the table's rows with the new type(s)")
        elif has_rows(buf.table):
            buf.replacement = pending
            self.log(f"{buf.stream.label}: column(s) {', '.join(replaced)} change type when the stream's new "
                     f"load replaces the table's contents")
        else:
            buf.table = replace_now(buf.table, pending)
            self.log(f"{buf.stream.label}: column(s) {', '.join(replaced)} changed type (the table is empty)")
        self._register_sink(buf)

    def _adopt_table(self, stream: CatalogStream, identifier: tuple[str, str], table: Any) -> None:
        committed, watermark, staged = olake_properties(table)
        buf = StreamBuffer(stream, identifier, table, list(stream.primary_key_columns), committed,
                           watermark, staged)
        inner = (committed or {}).get("stream_state") or {}
        buf.load_id = inner.get("load_id") or buf.load_id
        buf.load_op_key = inner.get("load_op_key")
        self.buffers[stream.key] = buf
        self._register_sink(buf)

    def _register_sink(self, buf: StreamBuffer) -> None:
        if self.sink is not None:
            table, schema = buf.table, buf.write_metadata.schema()
            self.sink.tables[buf.stream.key] = SinkTable(table.location(), schema.model_dump_json(),
                                                         table.spec().model_dump_json())

    def committed_state(self, stream: CatalogStream) -> dict | None:
        """The stream state committed in the stream's table (``olake.state``), or None. Reads only: an
        embedded catalog not created yet holds nothing and is not created here."""
        embedded = self.cfg.embedded_dir
        if embedded is not None and not os.path.exists(os.path.join(embedded, "catalog.db")):
            return None
        table = load_table(self.catalog, self.cfg.table_identifier(stream.namespace, stream.name))
        return None if table is None else olake_properties(table)[0]

    def add(self, key: tuple, data: dict) -> None:
        """Buffer one record's data (full-load rows are written to files as they accumulate)."""
        buf = self.buffers[key]
        buf.add(data)
        if len(buf.load_rows) >= DECODE_EVERY:
            buf.decode_load(self.log)
            if buf.load_table_rows >= self.cfg.rows_per_file:
                self._spill(buf)
        elif len(buf.change_rows) >= DECODE_EVERY:
            buf.decode_changes(self.log)

    def add_table(self, key: tuple, table: pa.Table, warnings: list[str]) -> None:
        """Buffer rows already decoded to the stream's destination types, with their _olake_* columns."""
        buf = self.buffers[key]
        buf.add_table(table, warnings, self.log)
        if buf.load_table_rows >= self.cfg.rows_per_file:
            self._spill(buf)

    def _spill(self, buf: StreamBuffer) -> None:
        """Write the decoded full-load rows as data files (referenced at the next commit)."""
        table = buf.take_load(self.log)
        if table is not None:
            buf.written += write_rows(buf.write_metadata, buf.table.io, table.drop_columns([TOAST]),
                                      self.cfg.compression)

    def widen(self, stream: CatalogStream) -> None:
        """Later records of ``stream`` use its new, wider schema: the table gains or widens columns."""
        buf = self.buffers[stream.key]
        buf.decode_load(self.log)
        buf.decode_changes(self.log)
        replaced = replaced_columns(buf.table, stream)
        if check_table(buf.table, stream, replaced):
            buf.table = evolve_table(buf.table, stream, replaced)
            self._register_sink(buf)
        buf.stream = stream
        self._replace_columns(buf, replaced)

    def observe_state(self, state: State) -> None:
        """Learn which load the records that follow belong to (and the rank of its rows)."""
        for ss in state.streams:
            buf = self.buffers.get(ss.key)
            extra = ss.extra or {}
            if buf is not None and extra.get("load_id") and extra["load_id"] != buf.load_id:
                buf.decode_load(self.log)
                buf.load_id = extra["load_id"]
            if buf is not None and extra.get("load_op_key"):
                buf.load_op_key = extra["load_op_key"]

    def commit(self, state: State) -> State:
        """Commit every buffered record of the streams ``state`` names, with it, one table at a time;
        returns ``state``, or a copy in which a stream whose table lost its load is a re-sync marker."""
        streams = []
        for ss in state.streams:
            buf = self.buffers.get(ss.key)
            streams.append(ss if buf is None else self._commit_stream(buf, ss))
        if any(new is not old for new, old in zip(streams, state.streams)):
            state = State(state.level, state.version, streams)
        self.observe_state(state)
        return state

    def _commit_stream(self, buf: StreamBuffer, ss: StreamState) -> StreamState:
        """One table's commit (``commit.commit_stream``), its errors as one DestinationError line."""
        try:
            return commit_stream(buf, ss, self.options)
        except OlakeError:
            raise
        except OSError as exc:
            raise DestinationError(f"iceberg: {buf.stream.label}: {exc.strerror or exc}") from None
        except Exception as exc:  # pyiceberg and catalog errors come in many types
            raise DestinationError(f"iceberg: {buf.stream.label}: commit failed: {type(exc).__name__}: "
                                   f"{redact(str(exc), self.cfg)}") from None

    def has_uncommitted(self) -> bool:
        """Whether records arrived that no STATE has covered yet (they are never committed)."""
        return any(buf.has_rows() for buf in self.buffers.values())
