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
from typing import Any
from collections.abc import Callable

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.core.errors import ConfigError, DestinationError, OlakeError
from olake_cli.destinations.iceberg.chunk_sink import IcebergChunkSink, SinkTable
from olake_cli.destinations.iceberg.commit import CommitOptions, commit_stream
from olake_cli.destinations.iceberg.config import (lock_path, open_catalog, parse_config, prepare_embedded,
                                                    probe_warehouse, redact)
from olake_cli.destinations.iceberg.retype import replace_now, replaced_columns, replacement
from olake_cli.destinations.iceberg.rewrite import converts
from olake_cli.destinations.iceberg.stream import IcebergStream
from olake_cli.destinations.iceberg.tables import (check_table, create_table, evolve_table, has_rows, load_table,
                                                   olake_properties)


class IcebergDestination:
    """Each STATE commits the rows before it with that state, one table transaction per stream."""

    follow_commit_interval_s = 60.0  # --follow's default cadence: each commit is a snapshot with new data and delete files

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        self.cfg = parse_config(config)
        self.log = log
        self._catalog: Any = None
        self.streams: dict[tuple, IcebergStream] = {}
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
        streams = [s for s in catalog.selected_streams() if s.key not in self.streams]
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
            self._replace_columns(self.streams[stream.key], replaced)

    def stream_target(self, key: tuple) -> IcebergStream | None:
        """An opened stream."""
        return self.streams.get(key)

    def _replace_columns(self, buf: IcebergStream, replaced: list[str]) -> None:
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
        buf = IcebergStream(stream, identifier, table, list(stream.primary_key_columns), self.cfg.rows_per_file,
                            self.cfg.compression, committed, watermark, staged)
        self.streams[stream.key] = buf
        self._register_sink(buf)

    def _register_sink(self, buf: IcebergStream) -> None:
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

    def widen(self, stream: CatalogStream) -> None:
        """Later records of ``stream`` use its new, wider schema: the table gains or widens columns."""
        buf = self.streams[stream.key]
        replaced = replaced_columns(buf.table, stream)
        if check_table(buf.table, stream, replaced):
            buf.table = evolve_table(buf.table, stream, replaced)
            self._register_sink(buf)
        buf.stream = stream
        self._replace_columns(buf, replaced)

    def commit(self, batches: list[CommitBatch]) -> None:
        """Commit each batch's rows with its stream state, one table at a time."""
        for batch in batches:
            self._commit_stream(self.streams[batch.state.key], batch)

    def _commit_stream(self, buf: IcebergStream, batch: CommitBatch) -> None:
        """One table's commit (``commit.commit_stream``), its errors as one DestinationError line."""
        try:
            commit_stream(buf, batch, self.options)
        except OlakeError:
            raise
        except OSError as exc:
            raise DestinationError(f"iceberg: {buf.stream.label}: {exc.strerror or exc}") from None
        except Exception as exc:  # pyiceberg and catalog errors come in many types
            raise DestinationError(f"iceberg: {buf.stream.label}: commit failed: {type(exc).__name__}: "
                                   f"{redact(str(exc), self.cfg)}") from None
