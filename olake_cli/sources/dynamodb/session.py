"""A DynamoDB read session: the selected tables checked against the live account (DISCOVERY re-checked
on every run), INIT_SYNC planned as one chunk per parallel-scan segment, and the chunks' readers.

DynamoDB has no snapshot a scan could share, so every segment reads the current items; ``cdc`` streams
converge because change capture replays every record made since shortly before the scan began (writes
are idempotent).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from olake_cli.core.contracts import FullLoadPlan
from olake_cli.core.errors import CatalogError, ConfigError, OlakeError
from olake_cli.core.state import StreamState
from olake_cli.sources.dynamodb.connection import DynamoSettings
from olake_cli.sources.dynamodb.scan import DynamoChunkReader, parse_segment_bound, segment_bound
from olake_cli.sources.dynamodb.tables import TableInfo, configured_tables, describe_table, still_configured

CHUNK_COLUMN = "scan_segment"


class DynamoReadSession:
    """The run's view of the tables (a context manager; boto3 clients need no closing)."""

    def __init__(self, settings: DynamoSettings, streams: list[Any], log: Callable[[str], None]) -> None:
        self.settings, self.log = settings, log
        self.warnings: list[str] = []
        self.client = settings.client()
        configured = configured_tables(self.client, settings)  # as check and discover: refused when none is found
        self.tables: dict[tuple, TableInfo] = {s.key: self._checked_table(s) for s in streams}
        if settings.tags is not None:
            self._note_new_tables(configured, {s.name for s in streams})

    def __enter__(self) -> DynamoReadSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _checked_table(self, stream: Any) -> TableInfo:
        """The stream's table, still what the config names and the catalog says (else an error)."""
        where = f"catalog: stream '{stream.label}'"
        if stream.namespace != self.settings.namespace:
            raise CatalogError(f"{where} belongs to namespace '{stream.namespace}', but the config's namespace "
                               f"is '{self.settings.namespace}' (run discover again)")
        if stream.sync_mode not in ("full_refresh", "cdc"):
            raise CatalogError(f"{where}: sync_mode '{stream.sync_mode}' is not supported by DynamoDB "
                               "(full_refresh or cdc)")
        info = describe_table(self.client, self.settings, stream.name)
        reason = still_configured(self.client, self.settings, info)
        if reason is not None:
            raise CatalogError(f"{where}: {reason}; fix the table or run discover again")
        if stream.sync_mode == "cdc" and info.stream_problem() is not None:
            raise ConfigError(f"dynamodb: {info.stream_problem()}")
        if list(stream.primary_key_columns) != list(info.key_names):
            raise CatalogError(f"{where}: primary key {stream.primary_key_columns} is not the table's key "
                               f"{list(info.key_names)} (run discover again)")
        return info

    def _note_new_tables(self, configured: list[TableInfo], known: set[str]) -> None:
        """Warn about tables that now pass the tag filter but are not in the catalog."""
        for info in configured:
            if info.name not in known:
                self.warnings.append(f"dynamodb: table '{info.name}' now carries {self.settings.tags.describe()} "
                                     "but is not in the catalog; run discover again to copy it")

    def key_columns(self, stream: Any) -> tuple[str, ...]:
        """The table's key attributes: partition key, then sort key."""
        return self.tables[stream.key].key_names

    def plan_full_load(self, stream: Any) -> FullLoadPlan:
        """One chunk per scan segment (INIT_SYNC), or none with ``init_sync: skip`` for a cdc stream."""
        info = self.tables[stream.key]
        identity = {"table_id": info.table_id}
        if stream.sync_mode == "cdc" and self.settings.init_sync == "skip":
            self.log(f"{stream.label}: init_sync = skip: no INIT_SYNC; change capture starts at the "
                     "stream's current end")
            return FullLoadPlan([], CHUNK_COLUMN, identity, 0)
        total = self.settings.segments
        self.log(f"{stream.label}: INIT_SYNC: parallel scan of table '{info.name}' in {total} segment(s)")
        return FullLoadPlan([(segment_bound(i, i, total, None), None) for i in range(total)], CHUNK_COLUMN,
                            identity, info.item_count)

    def resume_blocker(self, stream: Any, previous: StreamState) -> str | None:
        """Segments keep their meaning unless the table was created again since the load began."""
        if previous.chunk_column != CHUNK_COLUMN:
            return "its chunks are not DynamoDB scan segments"
        if previous.source.get("table_id") != self.tables[stream.key].table_id:
            return "the table was deleted and created again since its INIT_SYNC began"
        try:
            for chunk in previous.chunks or []:
                parse_segment_bound(chunk.min)
        except OlakeError as exc:
            return f"its chunks cannot be read back ({exc})"
        return None

    def chunk_reader(self, stream: Any, load: StreamState, index: int) -> DynamoChunkReader:
        """The reader of chunk ``index``: its segment, from the key its bound names."""
        segment, total, start = parse_segment_bound(load.chunks[index].min)
        info = self.tables[stream.key]
        return DynamoChunkReader(settings=self.settings, table=info.name, segment=segment, total_segments=total,
                                 start_key=start, json_schema=stream.json_schema, key_names=info.key_names,
                                 label=stream.label, chunk_index=index)

    def max_cursor(self, stream: Any) -> Any:
        """DynamoDB streams have no incremental cursor (the session refuses that mode)."""
        raise CatalogError(f"catalog: stream '{stream.label}': DynamoDB supports full_refresh and cdc only")

    def incremental_reader(self, stream: Any, after: Any, upto: Any) -> DynamoChunkReader:
        """See :meth:`max_cursor`."""
        return self.max_cursor(stream)
