"""Change capture from Kafka topics: each stream's partitions from the offsets its state holds.

Before any stream starts, :meth:`KafkaChangeCapture.preflight` checks every topic exists, that stored
offsets are still kept and not past their partition's end (else ``on_position_lost``), and takes the start
position from ``start_from``. A bounded read ends at each partition's end as the read reaches it (a
checkpoint every ``batch_messages`` changes, or ``core.follow.CHECKPOINT_EVERY`` if fewer, and at the end); ``--follow`` reads on,
checkpointing when the run's commit policy says so. The consumer is assigned its partitions explicitly (no consumer group), reads ``read_committed``, and
commits nothing: the offsets live in the state the destination commits with the data.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from collections.abc import Callable, Iterator
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import Change, runs_of_changes
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import ConfigError, PositionLostError, SourceError
from olake_cli.core.follow import CHECKPOINT_EVERY, Follow
from olake_cli.core.opid import OpId
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.position_lost import handle_lost_position
from olake_cli.core.state import State, StreamState
from olake_cli.shared.kafka.client import ErrorLog, failure, require_client
from olake_cli.sources.kafka.connection import (
    KafkaSourceSettings, cluster_topics, offsets_at, open_consumer, partition_end, watermarks,
)
from olake_cli.sources.kafka.processing import ProcessingTopic
from olake_cli.sources.kafka.positions import KafkaPosition, OpCounter, TopicCursor, cursor_of, with_cursor
from olake_cli.sources.kafka.records import StreamMessages, topic_of, where

_POLL_S = 0.5


class KafkaChangeCapture:
    """Reads the run's topics (``core.contracts.ChangeCapture`` and ``FollowingCapture``)."""

    def __init__(self, settings: KafkaSourceSettings, streams: list[CatalogStream], log: Callable[[str], None]) -> None:
        self.settings, self.streams, self.log = settings, streams, log
        self.topics = {s.key: topic_of(s) for s in streams}
        self.partitions: dict[str, list[int]] = {}
        self.ops = OpCounter()
        self._start: KafkaPosition | None = None
        self.processing: ProcessingTopic | None = None

    # -- positions ---------------------------------------------------------------------------

    def position_of(self, ss: StreamState | None) -> KafkaPosition | None:
        """The position a stream state holds (its topic's cursor), or None."""
        held = cursor_of(ss)
        return None if held is None else KafkaPosition(held[1], {held[0].topic: held[0]})

    def with_position(self, ss: StreamState, position: KafkaPosition) -> StreamState:
        """A copy of ``ss`` holding its topic's cursor of ``position``."""
        cursor = position.topics.get(self.topics.get(ss.key, ss.source.get("topic")))
        return ss.copy() if cursor is None else with_cursor(ss, cursor, position.op)

    def position_op(self, position: KafkaPosition) -> OpId:
        """The checkpoint's operation id (see ``positions``)."""
        return position.op

    def start_position(self) -> KafkaPosition:
        """The position ``start_from`` gives, taken by :meth:`preflight`."""
        assert self._start is not None, "preflight() runs first"
        return self._start

    def load_marks(self, session: Any) -> dict[str, Any]:
        """Nothing: a stream's load is read as changes (``records``)."""
        return {}

    # -- preflight ---------------------------------------------------------------------------

    def preflight(self, state: State, pipeline: PipelineIdentity | None = None) -> None:
        """Every topic exists; stored offsets are still kept; the start position (any number of pipelines
        may read a topic: ``pipeline`` claims nothing)."""
        settings, held_ops, starts = self.settings, [], {}
        with open_consumer(settings) as (consumer, errors):
            found = cluster_topics(consumer, settings, errors)
            for stream in self.streams:
                topic = self.topics[stream.key]
                if topic not in found:
                    raise ConfigError(f"kafka: {stream.label}: topic '{topic}' does not exist on "
                                      f"{settings.kafka.bootstrap_servers}")
                self.partitions[topic] = found[topic]
                marks = watermarks(consumer, settings, errors, topic, found[topic])
                held = cursor_of(state.find(*stream.key))
                if held is not None:
                    held_ops.append(held[1])
                    reason = _lost(held[0], marks) or _past_end(consumer, settings, errors, held[0], marks)
                    if reason is not None:
                        handle_lost_position(state, stream.key, stream.label, reason, settings.on_position_lost,
                                             self.log)
                starts[topic] = self._start_cursor(consumer, errors, topic, marks)
        self.ops = OpCounter(max(held_ops, default=None))
        self._start = KafkaPosition(self.ops.next(), starts)
        if settings.processing_topic is not None:
            self.processing = ProcessingTopic(settings.kafka, settings.processing_topic, list(self.topics))
            self.processing.prepare()

    def release(self, committed: State) -> None:
        """The destination committed ``committed``: announce it on the processing topic, if one is set (the
        topics keep their messages whatever olake read: there is no log to let go)."""
        if self.processing is not None:
            self.processing.publish(committed)

    def _start_cursor(self, consumer: Any, errors: ErrorLog, topic: str,
                      marks: dict[int, tuple[int, int]]) -> TopicCursor:
        """Where a stream without a position starts (``start_from``)."""
        start = self.settings.start_from
        if start == "latest":
            return TopicCursor(topic, {p: high for p, (_, high) in marks.items()})
        lows = {p: low for p, (low, _) in marks.items()}
        if isinstance(start, dict) and "timestamp" in start:
            at = offsets_at(consumer, self.settings, errors, topic, list(marks), _time_ms(start["timestamp"]))
            return TopicCursor(topic, {p: marks[p][1] if o is None else o for p, o in at.items()})
        skip = start.get("op_id") if isinstance(start, dict) else None
        return TopicCursor(topic, lows, skip_op_id=skip)

    # -- reading -----------------------------------------------------------------------------

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False) -> Iterator[ChangeBatch]:
        """The topics' messages from the streams' positions up to the partitions' ends at the call."""
        with open_consumer(self.settings) as (consumer, errors):
            reader = _Reader(self, consumer, errors, streams, state)
            self.log(f"change capture: {len(streams)} Kafka topic(s), {len(reader.partitions)} partition(s) read to "
                     "their ends")
            yield from reader.bounded()

    def follow(self, streams: list[CatalogStream], state: State, follow: Follow,
               typed: bool = False) -> Iterator[ChangeBatch]:
        """The topics' messages without an end, checkpointed as ``follow.policy`` says, until ``follow.stop``."""
        with open_consumer(self.settings) as (consumer, errors):
            yield from _Reader(self, consumer, errors, streams, state).following(follow)


def _lost(cursor: TopicCursor, marks: dict[int, tuple[int, int]]) -> str | None:
    """Why ``cursor`` cannot be resumed (a partition gone, an offset no longer kept), or None."""
    for partition, offset in sorted(cursor.offsets.items()):
        if partition not in marks:
            return f"partition {partition} of topic '{cursor.topic}' no longer exists"
        low = marks[partition][0]
        if offset < low:
            return (f"offset {offset} of topic '{cursor.topic}' partition {partition} is no longer kept (the oldest "
                    f"is {low}: the topic's retention removed it)")
    return None


def _past_end(consumer: Any, settings: KafkaSourceSettings, errors: ErrorLog, cursor: TopicCursor,
              marks: dict[int, tuple[int, int]]) -> str | None:
    """Why ``cursor`` points past a partition's end (the topic was written anew, or the broker lost
    messages: no fetch there would ever answer), or None. Checked by a fetch where the listed end is
    lower than the stored offset (``connection.partition_end``)."""
    for partition, offset in sorted(cursor.offsets.items()):
        low, high = marks[partition]
        if offset > high and offset > (end := partition_end(consumer, settings, errors, cursor.topic, partition,
                                                            max(low, high - 1))):
            return (f"offset {offset} of topic '{cursor.topic}' partition {partition} is beyond the partition's end "
                    f"({end}): the topic was written anew or the broker lost messages")
    return None


def _time_ms(text: str) -> int:
    """``start_from``'s time as milliseconds since 1970 (a ConfigError when it is not ISO 8601 with an offset)."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ConfigError(f"kafka: start_from timestamp {text!r} is not an ISO 8601 time with an offset")
    return int(moment.timestamp() * 1000)


class _Reader:
    """The run's streams read from one consumer, gathering changes between checkpoints."""

    def __init__(self, capture: KafkaChangeCapture, consumer: Any, errors: ErrorLog, streams: list[CatalogStream],
                 state: State) -> None:
        self.capture, self.consumer, self.errors = capture, consumer, errors
        self.kafka = require_client()
        settings = capture.settings
        self.changes: list[Change] = []
        self.streams: dict[str, StreamMessages] = {}
        self.partitions: list[tuple[str, int]] = []
        for stream in streams:
            topic = capture.topics[stream.key]
            marks = watermarks(consumer, settings, errors, topic, capture.partitions[topic])
            cursor = cursor_of(state.find(*stream.key))[0]
            cursor = replace(cursor, offsets={p: cursor.offsets.get(p, low) for p, (low, _) in marks.items()})
            self.streams[topic] = StreamMessages(stream, cursor, sorted(marks), settings.value_format,
                                                 settings.message_values, capture.ops, self.changes)
            self.partitions += [(topic, p) for p in sorted(marks)]
        consumer.assign([self.kafka.TopicPartition(t, p, o) for t, r in self.streams.items()
                         for p, o in r.cursor.offsets.items()])
        self.checkpointed = self._offsets()
        self.outage = False  # following: the brokers stopped answering, and a line said so

    def bounded(self) -> Iterator[ChangeBatch]:
        """Until every partition reports its end (what was committed when the read got there), a
        checkpoint every ``batch_messages`` (or CHECKPOINT_EVERY) changes and one at the end."""
        open_parts = set(self.partitions)
        size, quiet_since = self.capture.settings.batch_messages, time.monotonic()
        every = min(size, CHECKPOINT_EVERY)
        while open_parts:
            messages = self.consumer.consume(num_messages=size, timeout=_POLL_S)
            for message in messages:
                tp = (message.topic(), message.partition())
                if tp in open_parts and self._take(message):
                    open_parts.discard(tp)
                if len(self.changes) >= every:
                    yield self.checkpoint()
            quiet_since = time.monotonic() if messages else self._stalled(quiet_since, open_parts)
        yield self.checkpoint()

    def following(self, follow: Follow) -> Iterator[ChangeBatch]:
        """Without an end until ``follow.stop`` (then a last checkpoint), as ``follow.policy`` says."""
        policy, size = follow.policy, self.capture.settings.batch_messages
        while not follow.stop.is_set():
            messages = self.consumer.consume(num_messages=size, timeout=_POLL_S)
            for message in messages:
                self._take(message)
            self._say_outage(bool(messages))
            pending, caught_up = len(self.changes), len(messages) < size
            if (caught_up and policy.at_end(pending)) or policy.inside(pending) \
                    or (not messages and policy.idle(pending, self._offsets() != self.checkpointed)):
                yield self.checkpoint()
                policy.checkpointed()
        if self.changes or self._offsets() != self.checkpointed:
            yield self.checkpoint()

    def _say_outage(self, read: bool) -> None:
        """Following: one line when the brokers stop answering (librdkafka reports it and reconnects by
        itself; the run reads on from its position once they answer again), none again until they have."""
        if read:
            self.errors.take()
            self.outage = False
        elif not self.outage and (trouble := self.errors.take()) is not None:
            self.outage = True
            self.capture.log(f"change capture: {self.capture.settings.where()}: {trouble}; the client connects "
                             f"again by itself, and reading goes on from the last position read")

    def checkpoint(self) -> ChangeBatch:
        """The changes gathered since the last checkpoint, and every stream's position after them."""
        runs = runs_of_changes(self.changes)
        self.changes.clear()
        self.checkpointed = self._offsets()
        return ChangeBatch(runs=runs, position=KafkaPosition(self.capture.ops.next(),
                                                             {t: r.cursor for t, r in self.streams.items()}))

    def _offsets(self) -> dict[str, dict[int, int]]:
        return {t: dict(r.cursor.offsets) for t, r in self.streams.items()}

    def _take(self, message: Any) -> bool:
        """Apply one consumed message or event; True when it says its partition has nothing more for now
        (the broker's end, not ``get_watermark_offsets``: tansu's counts a batch as one offset)."""
        error = message.error()
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        stream = self.streams.get(topic)
        if error is not None:
            return self._event(error, stream, topic, partition, offset)
        if stream is not None:
            _, stamp = message.timestamp()
            stream.take(partition, offset, message.key(), message.value(), stamp if stamp >= 0 else None,
                        message.headers())
        return False

    def _event(self, error: Any, stream: StreamMessages | None, topic: str, partition: int, offset: int) -> bool:
        """A consumer event: a partition's end for now (its position moves there, past transaction markers),
        a lost offset, or a failure."""
        kafka = self.kafka.KafkaError
        if error.code() == kafka._PARTITION_EOF:
            if stream is not None and offset > stream.cursor.offsets.get(partition, offset):
                stream.cursor = stream.cursor.moved(partition, offset)
            return True
        if error.code() in (kafka._AUTO_OFFSET_RESET, kafka.OFFSET_OUT_OF_RANGE):
            raise PositionLostError(f"{where(topic, partition, offset)}: the offset is no longer kept (retention "
                                    f"removed it); {error.str()}")
        if error.fatal() or error.code() in (kafka.UNKNOWN_TOPIC_OR_PART, kafka._UNKNOWN_PARTITION):
            raise failure(self.kafka.KafkaException(error), self.capture.settings.kafka, f"reading topic '{topic}'",
                          self.errors, SourceError)
        return False  # (brokers lost for a while: librdkafka connects again; see _stalled)

    def _stalled(self, since: float, open_parts: set[tuple[str, int]]) -> float:
        """After a poll without messages: ``since`` (when the reader last got one); a SourceError once it has
        waited ``timeout_s`` for the partitions still open while the brokers report errors."""
        timeout = self.capture.settings.kafka.timeout_s
        if time.monotonic() - since > timeout and self.errors.last is not None:
            raise failure(TimeoutError(self.errors.last), self.capture.settings.kafka,
                          f"reading {len(open_parts)} partition(s)", self.errors, SourceError)
        return since
