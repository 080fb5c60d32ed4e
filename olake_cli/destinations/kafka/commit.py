"""The messages of one stream's share of a commit (a ``CommitBatch``), in the order a consumer applies them.

A commit that starts a new load (first load, full refresh, re-sync, new load after a catalog change)
begins with a load marker in every partition; one after a source TRUNCATE begins with a truncate marker
(the same envelope, ``reason`` "truncate"). Then the load's rows (op ``r``), then the changes in log order
(incremental rows ``r``, ``c``, ``u``, ``d`` and the tombstone after each delete). A re-sync marker
(``core.resync``) carries no rows: only the state moves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.shared.kafka import envelope


@dataclass
class KafkaStream:
    """One stream of the Kafka destination during a run (the ``StreamTarget`` the stream buffer sees)."""

    stream: CatalogStream
    topic: str
    partitions: int
    committed: dict | None = None  # when opened: the stream state the state topic holds
    watermark: str | None = None  # when opened: the highest operation id applied
    catalog_sent: bool = False  # the catalog topic holds the stream's current entry
    holder: str = "the topic"


Outgoing = tuple[int, bytes | None, bytes | None]  # (partition, key, value)


def marker_messages(target: KafkaStream, batch: CommitBatch, fmt: str) -> list[Outgoing]:
    """The load or truncate marker ``batch`` begins with, once per partition (none: it begins with rows)."""
    if batch.marker:
        return []
    ref = envelope.stream_ref(target.stream.namespace, target.stream.name)
    if batch.new_load and (_load(batch) is not None or batch.state.sync_type == "full-load"):
        key, value = envelope.load_marker(ref, batch.load_id, batch.op_key, "load", fmt)
    elif batch.truncated:
        key, value = envelope.load_marker(ref, batch.load_id, None, "truncate", fmt)
    else:
        return []
    return [(partition, key, value) for partition in range(target.partitions)]


def row_messages(target: KafkaStream, batch: CommitBatch, fmt: str) -> Iterator[envelope.Message]:
    """The rows of ``batch`` after its marker: the load's, then the changes (each delete and its tombstone)."""
    if batch.marker:
        return
    stream = target.stream
    ref = envelope.stream_ref(stream.namespace, stream.name)
    key_columns = tuple(stream.primary_key_columns)
    for table in (_load(batch), batch.changes):
        if table is None or table.num_rows == 0:
            continue
        for key, value in envelope.table_messages(table, stream.json_schema, key_columns, ref, batch.load_id, fmt):
            if value is not None or key is not None:  # (no tombstone without a key)
                yield key, value


def _load(batch: CommitBatch):
    """The batch's full-load rows (None: none, or a replay of chunks the topic holds)."""
    load = None if batch.load_replayed else batch.load
    return load if load is not None and load.num_rows > 0 else None
