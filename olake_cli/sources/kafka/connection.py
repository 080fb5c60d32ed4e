"""The Kafka source's settings, its consumer, and what it asks the brokers: topics, partitions, offsets.

The consumer reads ``read_committed`` (only what olake's destination committed, or any producer's
committed transactions), never commits offsets (positions live in olake's state) and is assigned its
partitions explicitly at the offsets the state holds; ``auto.offset.reset`` is ``error``, so an offset
the broker no longer keeps is never silently replaced.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.shared.kafka.client import ErrorLog, KafkaSettings, failure, require_client

_FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False, "isolation.level": "read_committed",
          "enable.partition.eof": True, "auto.offset.reset": "error"}
GROUP_ID = "olake-kafka-source"  # librdkafka wants one; no offset is ever committed to it


@dataclass(frozen=True)
class KafkaSourceSettings:
    """A validated ``kafka`` source config."""

    kafka: KafkaSettings
    topics: tuple[str, ...] | None
    pattern: str | None
    namespace: str
    message_values: str
    value_format: str
    start_from: Any
    on_position_lost: str
    batch_messages: int
    processing_topic: str | None

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> KafkaSourceSettings:
        """Settings from a validated config (exactly one of ``topics`` and ``topic_pattern``)."""
        topics, pattern = cfg.get("topics"), cfg.get("topic_pattern")
        if (topics is None) == (pattern is None):
            raise ConfigError("kafka: give exactly one of 'topics' (a list of topics) and 'topic_pattern' "
                              "(a regular expression)")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(f"kafka: topic_pattern {pattern!r} is not a regular expression ({exc})") from None
        return cls(KafkaSettings.from_config(cfg, "consumer"), None if topics is None else tuple(topics), pattern,
                   cfg.get("namespace", "kafka"), cfg.get("message_values", "text"), cfg.get("value_format", "auto"),
                   cfg.get("start_from", "earliest"), cfg.get("on_position_lost", "fail"),
                   int(cfg.get("batch_messages", 10000)), cfg.get("processing_topic"))

    def where(self) -> str:
        """The brokers, as lines name them."""
        return f"kafka at {self.kafka.bootstrap_servers}"


@contextmanager
def open_consumer(settings: KafkaSourceSettings) -> Iterator[tuple[Any, ErrorLog]]:
    """A consumer with olake's fixed settings (see the module) and its error log; closed on exit."""
    kafka = require_client()
    errors = ErrorLog()
    config = {**settings.kafka.client_config({"group.id": GROUP_ID}, errors), **_FIXED}
    try:
        consumer = kafka.Consumer(config)
    except Exception as exc:
        raise ConfigError(settings.kafka.clean(f"kafka: the consumer settings are not valid: {exc}")) from None
    try:
        yield consumer, errors
    finally:
        consumer.close()


def cluster_topics(consumer: Any, settings: KafkaSourceSettings, errors: ErrorLog) -> dict[str, list[int]]:
    """Every topic of the cluster with its partitions (a ServerUnreachable when the brokers do not answer
    within ``timeout_s``)."""
    try:
        metadata = consumer.list_topics(timeout=settings.kafka.timeout_s)
    except Exception as exc:
        raise failure(exc, settings.kafka, "listing topics", errors, SourceError) from None
    return {name: sorted(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def selected_topics(settings: KafkaSourceSettings, found: dict[str, list[int]]) -> list[str]:
    """The topics the config names that exist (``topics``: a ConfigError naming those that do not), or
    those ``topic_pattern`` matches (never internal ones, nor olake's catalog and state topics)."""
    if settings.topics is not None:
        missing = [t for t in settings.topics if t not in found]
        if missing:
            raise ConfigError(f"kafka: topic(s) {', '.join(missing)} do not exist on {settings.kafka.bootstrap_servers}")
        return list(settings.topics)
    own = {settings.kafka.catalog_topic, settings.kafka.state_topic}
    return sorted(t for t in found if not t.startswith("_") and t not in own
                  and re.fullmatch(settings.pattern, t) is not None)


def watermarks(consumer: Any, settings: KafkaSourceSettings, errors: ErrorLog, topic: str,
               partitions: list[int]) -> dict[int, tuple[int, int]]:
    """Partition -> (oldest offset kept, offset after the last message) of ``topic``."""
    kafka = require_client()
    marks = {}
    for partition in partitions:
        try:
            marks[partition] = consumer.get_watermark_offsets(kafka.TopicPartition(topic, partition),
                                                              timeout=settings.kafka.timeout_s, cached=False)
        except Exception as exc:
            raise failure(exc, settings.kafka, f"reading the offsets of topic '{topic}' partition {partition}",
                          errors, SourceError) from None
        if marks[partition] is None:
            raise SourceError(f"{settings.where()}: no offsets for topic '{topic}' partition {partition} within "
                              f"{settings.kafka.timeout_s:g}s")
    return marks


def offsets_at(consumer: Any, settings: KafkaSourceSettings, errors: ErrorLog, topic: str,
               partitions: list[int], time_ms: int) -> dict[int, int | None]:
    """Partition -> the first offset at or after ``time_ms`` (None: no message that late yet)."""
    kafka = require_client()
    asked = [kafka.TopicPartition(topic, p, time_ms) for p in partitions]
    try:
        found = consumer.offsets_for_times(asked, timeout=settings.kafka.timeout_s)
    except Exception as exc:
        raise failure(exc, settings.kafka, f"finding the offsets of topic '{topic}' at a time", errors,
                      SourceError) from None
    return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}


def partition_end(consumer: Any, settings: KafkaSourceSettings, errors: ErrorLog, topic: str, partition: int,
                  near: int) -> int:
    """The offset after the last message of a partition as a fetch reports it (its end event), read from
    ``near``: the offsets the brokers list are not enough (tansu 0.6 counts a partition's last batch as one
    offset there). ``consumer`` is assigned that partition only while this runs."""
    kafka = require_client()
    consumer.assign([kafka.TopicPartition(topic, partition, near)])
    deadline = time.monotonic() + settings.kafka.timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            error = None if message is None else message.error()
            if error is not None and error.code() == kafka.KafkaError._PARTITION_EOF:
                return message.offset()
    finally:
        consumer.unassign()
    raise failure(TimeoutError(f"no end of partition within {settings.kafka.timeout_s:g}s"), settings.kafka,
                  f"finding the end of topic '{topic}' partition {partition}", errors, SourceError)
