"""Kafka destination: one topic per stream, each commit one Kafka transaction with its stream states.

Each stream's rows and changes become messages of olake's envelope (``shared.kafka.envelope``) on the
stream's topic (``topic_template``); the stream's state goes to the compacted state topic and its catalog
entry to the compacted catalog topic (records.py) in the same transaction. Within a transaction the data
messages are acknowledged before the state is sent, so that a state visible to any reader (even on a
broker that shows an aborted transaction's messages) covers messages that are there. ``open`` fences the
pipeline's earlier producer and reads back the committed states: a run resumes from the topic's record.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.core.errors import ConfigError
from olake_cli.core.faults import crash_point
from olake_cli.destinations.kafka import records
from olake_cli.destinations.kafka.chunk_sink import KafkaChunkSink
from olake_cli.destinations.kafka.commit import KafkaStream, marker_messages, row_messages
from olake_cli.destinations.kafka.config import DestinationSettings
from olake_cli.destinations.kafka.producer import Transactions
from olake_cli.shared.kafka.admin import admin_client, ensure_topics, topic_partitions
from olake_cli.shared.kafka.client import ErrorLog, failure, require_client, stream_label


class KafkaDestination:
    """Each STATE's streams commit in one Kafka transaction: their messages and their states."""

    follow_commit_interval_s = 1.0  # --follow's default cadence: a commit is one transaction

    def __init__(self, config: dict[str, Any], log: Callable[[str], None]) -> None:
        require_client()
        self.settings = DestinationSettings.from_config(config)
        self.log = log
        self.errors = ErrorLog()
        self._admin: Any = None
        self._txn: Transactions | None = None
        self._states: dict[str, records.Committed] = {}
        self._read: dict[str, records.Committed] | None = None  # the state topic as committed_state last read it
        self._catalog: dict[str, bytes] = {}
        self.streams: dict[tuple, KafkaStream] = {}
        self.sink: KafkaChunkSink | None = None
        self._state_partitions = 1

    @property
    def admin(self) -> Any:
        """The admin client, made on first use."""
        if self._admin is None:
            self._admin = admin_client(self.settings.kafka, self.errors)
        return self._admin

    def check(self) -> str:
        """Reach the brokers, make (or find) the catalog and state topics, and run an empty transaction."""
        from olake_cli.destinations.kafka.checks import check_destination

        return check_destination(self.settings, self.admin, self.errors)

    def lock_path(self) -> str:
        """The host lock of runs writing this pipeline's topics (``core.locks``)."""
        return self.settings.lock_path()

    def chunk_sink(self) -> KafkaChunkSink:
        """``sync`` tasks send their full-load chunks themselves, a transaction each (chunk_sink.py)."""
        if self.sink is None:
            self.sink = KafkaChunkSink(self.settings, {key: t.topic for key, t in self.streams.items()},
                                       self._state_partitions, {t.topic: t.partitions for t in self.streams.values()})
        return self.sink

    def open(self, catalog: Catalog) -> None:
        """Make or check every selected stream's topic, fence the pipeline's earlier producer, and read back
        what the state and catalog topics hold."""
        self._read = None  # opening may fence a run whose record the next read must see settled
        streams = [s for s in catalog.selected_streams() if s.key not in self.streams]
        if not streams and self._txn is not None:
            return
        topics = {stream.key: self.settings.kafka.topic_of(stream.namespace, stream.name) for stream in streams}
        self._refuse_shared_topics(streams, topics)
        found = ensure_topics(self.settings.kafka, self.admin, self.errors,
                              self.settings.topic_specs(list(dict.fromkeys(topics.values()))),
                              self.settings.create_topics, self.log)
        if self._txn is None:
            self._txn = Transactions(self.settings)  # fences the last run before its record is read
            self._states = records.committed_states(self.settings, found[self.settings.kafka.state_topic], self.errors)
            self._catalog = records.latest_catalog(self.settings, found[self.settings.kafka.catalog_topic], self.errors)
        self._state_partitions = found[self.settings.kafka.state_topic]
        if self.sink is not None:
            self.sink.state_partitions = self._state_partitions
            self.sink.topics.update({key: topics[key] for key in topics})
            self.sink.partitions.update({topic: found[topic] for topic in topics.values()})
        for stream in streams:
            committed = self._states.get(self.settings.state_key(stream.namespace, stream.name))
            sent = self._catalog.get(stream_label(stream.namespace, stream.name)) == records.catalog_value(stream)
            self.streams[stream.key] = KafkaStream(stream, topics[stream.key], found[topics[stream.key]],
                                                   committed.state if committed else None,
                                                   committed.watermark if committed else None, sent)

    def _refuse_shared_topics(self, streams: list[CatalogStream], topics: dict[tuple, str]) -> None:
        owners = {buf.topic: buf.stream.label for buf in self.streams.values()}
        for stream in streams:
            other = owners.setdefault(topics[stream.key], stream.label)
            if other != stream.label:
                raise ConfigError(f"kafka destination: streams {other} and {stream.label} would both write topic "
                                  f"{topics[stream.key]!r}; change topic_template")

    def stream_target(self, key: tuple) -> KafkaStream | None:
        """An opened stream."""
        return self.streams.get(key)

    def widen(self, stream: CatalogStream) -> None:
        """Later rows follow the wider schema; the stream's new catalog entry goes with the next commit."""
        target = self.streams[stream.key]
        target.stream, target.catalog_sent = stream, False

    def commit(self, batches: list[CommitBatch]) -> None:
        """Commit every batch in one transaction: the data messages, acknowledged, then the catalog entries
        and the stream states."""
        txn = self._txn
        assert txn is not None, "commit before open"
        self._read = None
        txn.begin()
        try:
            self._send(txn, batches)
        except BaseException:
            txn.abort()
            raise
        crash_point("kafka-committed")
        for batch in batches:
            self.streams[batch.state.key].catalog_sent = True

    def _send(self, txn: Transactions, batches: list[CommitBatch]) -> None:
        fmt = self.settings.format
        for batch in batches:
            target = self.streams[batch.state.key]
            for partition, key, value in marker_messages(target, batch, fmt):
                txn.send(target.topic, key, value, partition)
            txn.send_rows(target.topic, row_messages(target, batch, fmt), target.partitions == 1)
        txn.flush()
        crash_point("kafka-data-sent")
        kafka = self.settings.kafka
        for batch in batches:
            target = self.streams[batch.state.key]
            if not target.catalog_sent:
                txn.send(kafka.catalog_topic, *records.catalog_message(target.stream))
            key, value, headers = records.state_message(self.settings, target.stream, batch.merged, batch.watermark,
                                                        txn.offsets(target.topic))
            txn.send(kafka.state_topic, key, value, None, headers)
        txn.flush()
        crash_point("kafka-state-sent")
        txn.commit()

    def committed_state(self, stream: CatalogStream) -> dict | None:
        """The stream state this pipeline last committed in the state topic, or None."""
        kafka = self.settings.kafka
        if self._read is None:  # one read of the topic serves every stream until the next open or commit
            partitions = topic_partitions(kafka, self.admin, self.errors).get(kafka.state_topic)
            if partitions is None:
                return None
            try:
                self._read = records.committed_states(self.settings, partitions, self.errors)
            except Exception as exc:
                raise failure(exc, kafka, "reading the committed state", self.errors) from None
        found = self._read.get(self.settings.state_key(stream.namespace, stream.name))
        return found.state if found else None
