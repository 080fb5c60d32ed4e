"""The Kafka destination's transactional producer: one transaction per commit, messages queued as fast
as librdkafka takes them, every delivery checked before the transaction commits.

``init_transactions`` (when the producer is made) fences any earlier producer of the same transactional
id and ends the transaction it left open, so a killed run's half-sent commit never becomes committed
after the new run has started.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from olake_cli.core.errors import DestinationError
from olake_cli.destinations.kafka.config import DestinationSettings
from olake_cli.shared.kafka.client import ErrorLog, failure, require_client

_PRODUCER = {"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random", "linger.ms": 20,
             "queue.buffering.max.kbytes": 262144, "queue.buffering.max.messages": 1_000_000, "batch.size": 1_000_000}
_BATCH = 10_000  # messages per produce_batch call


class Transactions:
    """A transactional producer for one destination."""

    def __init__(self, settings: DestinationSettings, transactional_id: str | None = None) -> None:
        kafka = require_client()
        self.settings, self.errors = settings, ErrorLog()
        self.undelivered: list[str] = []
        self.ranges: dict[tuple[str, int], list[int]] = {}  # (topic, partition) -> [first, last] offset sent
        timeout_ms = int(settings.kafka.timeout_s * 1000)
        config = settings.kafka.client_config({**_PRODUCER, "transactional.id": transactional_id or settings.transactional_id,
                                               "transaction.timeout.ms": max(60_000, timeout_ms),
                                               "message.timeout.ms": max(timeout_ms, 1000)}, self.errors)
        try:
            self.producer = kafka.Producer(config)
            self.producer.init_transactions(settings.kafka.timeout_s)
        except Exception as exc:
            raise failure(exc, settings.kafka, "starting a transactional producer", self.errors) from None

    def begin(self) -> None:
        """Begin a transaction."""
        self.undelivered, self.ranges = [], {}
        self._call(self.producer.begin_transaction, "beginning a transaction")

    def send(self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None,
             headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue one message of the transaction (waiting while librdkafka's queue is full)."""
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": self._delivered}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.05)

    def send_rows(self, topic: str, messages: Iterable[tuple[bytes | None, bytes | None]], one_partition: bool) -> None:
        """Queue keyed messages (partitioned by key) a batch at a time. On a topic of ``one_partition`` only the
        first and last message of each batch report their delivery (the offsets between are theirs); a
        message that is not delivered fails the transaction's commit either way."""
        batch: list[dict] = []
        for key, value in messages:
            batch.append({"key": key, "value": value})
            if len(batch) == _BATCH:
                self._send_batch(topic, batch, one_partition)
                batch = []
        if batch:
            self._send_batch(topic, batch, one_partition)

    def _send_batch(self, topic: str, batch: list[dict], one_partition: bool) -> None:
        if one_partition:
            batch[0]["callback"] = batch[-1]["callback"] = self._delivered
        else:
            for message in batch:
                message["callback"] = self._delivered
        while batch:
            queued = self.producer.produce_batch(topic, batch)
            if queued == len(batch):
                return
            batch = [m for m in batch if "_error" in m]
            for message in batch:
                del message["_error"]
            self.producer.poll(0.05)

    def flush(self) -> None:
        """Wait until every queued message is acknowledged; a DestinationError if any was not."""
        left = self.producer.flush(self.settings.kafka.timeout_s)
        if self.undelivered:
            raise DestinationError(self.settings.kafka.clean(f"kafka: a message was not delivered: "
                                                             f"{self.undelivered[0]}"))
        if left:
            raise failure(TimeoutError(f"{left} message(s) not acknowledged in time"), self.settings.kafka,
                          "sending messages", self.errors)

    def commit(self) -> None:
        """Commit the transaction."""
        self._call(lambda: self.producer.commit_transaction(self.settings.kafka.timeout_s), "committing a transaction")

    def abort(self) -> None:
        """Abort the transaction under way (quietly: the failure that led here is the one reported)."""
        try:
            self.producer.abort_transaction(self.settings.kafka.timeout_s)
        except Exception:  # fenced, or the broker is gone: the transaction ends with its timeout
            pass

    def offsets(self, topic: str) -> dict[str, list[int]]:
        """The offsets of the messages this transaction put on ``topic`` so far: partition -> [first, last]."""
        return {str(p): list(span) for (t, p), span in sorted(self.ranges.items()) if t == topic}

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.undelivered.append(f"topic {message.topic()}: {error.str()}")
            return
        span = self.ranges.setdefault((message.topic(), message.partition()), [message.offset(), message.offset()])
        span[0], span[1] = min(span[0], message.offset()), max(span[1], message.offset())

    def _call(self, step: Any, doing: str) -> None:
        try:
            step()
        except Exception as exc:
            raise failure(exc, self.settings.kafka, doing, self.errors) from None
