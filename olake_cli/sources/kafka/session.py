"""The read session of a Kafka run: a topic has no snapshot to copy, so a stream's "full load" is empty
and its change capture starts where ``start_from`` says (a topic olake wrote begins with its load: the
capture applies it, see ``records``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import FullLoadPlan
from olake_cli.core.errors import CatalogError
from olake_cli.core.state import StreamState


class KafkaReadSession:
    """The session of ``core.contracts.ReadSession``: no chunks to read."""

    def __init__(self, streams: list[CatalogStream], log: Callable[[str], None]) -> None:
        self.log = log
        self.warnings: list[str] = []
        for stream in streams:
            if stream.sync_mode != "cdc":
                raise CatalogError(f"{stream.label}: a Kafka topic is read with sync_mode cdc (its whole history "
                                   f"from start_from, then --follow or later runs), not {stream.sync_mode}")

    def __enter__(self) -> KafkaReadSession:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def key_columns(self, stream: CatalogStream) -> tuple[str, ...]:
        """The stream's primary key columns."""
        return tuple(stream.primary_key_columns)

    def plan_full_load(self, stream: CatalogStream) -> FullLoadPlan:
        """No chunks: the topic's messages come through change capture."""
        return FullLoadPlan(bounds=[])

    def resume_blocker(self, stream: CatalogStream, previous: StreamState) -> str | None:
        """Nothing to resume (a load has no chunks)."""
        return None

    def chunk_reader(self, stream: CatalogStream, load: StreamState, index: int) -> Any:
        """Never asked for: loads have no chunks."""
        raise CatalogError(f"{stream.label}: a Kafka stream has no full-load chunks")

    def max_cursor(self, stream: CatalogStream) -> Any:
        """No incremental cursor."""
        return None

    def incremental_reader(self, stream: CatalogStream, after: Any, upto: Any) -> Any:
        """Never asked for: Kafka streams are read with ``cdc``."""
        raise CatalogError(f"{stream.label}: a Kafka stream has no incremental mode")
