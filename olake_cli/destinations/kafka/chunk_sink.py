"""The fast path of ``olake sync`` into Kafka: a task sends its full-load chunk itself, in a transaction of
its own that also holds the chunk's mark in the state topic (records.py), so the chunk is in the topic
whole or not at all; the driver's commit of the STATE that marks the chunk done then carries no rows.

The rows of a load must follow the load's marker, which the driver commits with the load's first STATE;
a task waits until the state topic holds a state of the chunk's load before it sends anything. Each
chunk's transactional id names the chunk, so a retried attempt fences an earlier one still running. A
run that starts again counts a chunk whose mark is in the state topic as done (``committed_states``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from olake_cli.core import row_metadata
from olake_cli.core.errors import DestinationError
from olake_cli.core.faults import crash_point
from olake_cli.destinations.kafka import records
from olake_cli.destinations.kafka.config import DestinationSettings
from olake_cli.destinations.kafka.producer import Transactions
from olake_cli.shared.kafka import envelope
from olake_cli.shared.kafka.client import ErrorLog, stream_label


@dataclass
class KafkaChunkSink:
    """Picklable: the destination's settings and each opened stream's topic (filled as streams open)."""

    settings: DestinationSettings
    topics: dict[tuple, str] = field(default_factory=dict)
    state_partitions: int = 1
    partitions: dict[str, int] = field(default_factory=dict)  # topic -> its partitions
    writes_local_files = False  # tasks send over the network: any Spark master will do

    def write(self, namespace: str | None, stream: str, load_id: str | None, chunk_index: int,
              load_op_key: str | None, json_schema: dict, batches: Iterable[tuple[Any, dict | None]],
              key_columns: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        """Send one chunk's (batch, wire columns) pairs and its mark in one transaction; (rows, warnings)."""
        topic, label = self.topics[(namespace, stream)], stream_label(namespace, stream)
        self._await_load(namespace, stream, load_id or "")
        txn = Transactions(self.settings, f"{self.settings.transactional_id}|{label}|{load_id}|{chunk_index}")
        ref, rows = envelope.stream_ref(namespace, stream), 0
        txn.begin()
        try:
            for batch, given in batches:
                table = _with_load_metadata(pa.Table.from_batches([batch]), load_op_key)
                txn.send_rows(topic, envelope.table_messages(table, json_schema, key_columns, ref, load_id,
                                                             self.settings.format, given), self.partitions[topic] == 1)
                rows += batch.num_rows
            txn.flush()
            mark = records.chunk_mark(self.settings, namespace, stream, load_id or "", chunk_index, rows,
                                      txn.offsets(topic))
            txn.send(self.settings.kafka.state_topic, mark[0], mark[1], None, mark[2])
            txn.flush()
            crash_point("kafka-chunk-sent")
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        crash_point("kafka-chunk-committed")
        return rows, []

    def _await_load(self, namespace: str | None, stream: str, load_id: str) -> None:
        """Wait until the driver committed a state of load ``load_id`` (and so its marker)."""
        key, errors = self.settings.state_key(namespace, stream), ErrorLog()
        deadline = time.monotonic() + max(self.settings.kafka.timeout_s, 60.0)
        while True:
            held = records.committed_states(self.settings, self.state_partitions, errors).get(key)
            if held is not None and ((held.state or {}).get("stream_state") or {}).get("load_id") == load_id:
                return
            if time.monotonic() > deadline:
                raise DestinationError(f"kafka: the state of load {load_id} of {stream_label(namespace, stream)} "
                                       f"did not reach topic {self.settings.kafka.state_topic!r} in time")
            time.sleep(0.1)


def _with_load_metadata(table: pa.Table, load_op_key: str | None) -> pa.Table:
    """A scanned table with the ``_olake_*`` columns of plain full-load rows."""
    meta = row_metadata.of_load(table.num_rows, load_op_key)
    for name, column in ((row_metadata.OP, meta.ops), (row_metadata.OP_ID, meta.op_ids),
                         (row_metadata.COMMIT_TS, meta.commit_ts), (row_metadata.TOAST, meta.unchanged)):
        table = table.append_column(name, column)
    return table
