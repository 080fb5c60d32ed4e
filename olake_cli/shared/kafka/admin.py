"""Kafka admin steps and whole-topic reads, shared by the ``kafka`` source and destination.

``topic_partitions`` lists topics, ``ensure_topics`` creates the missing ones (or refuses them in one line
when creation is not allowed), and ``read_to_end`` reads every partition of a topic from its start to its
end as a ``read_committed`` consumer (the catalog and state topics are read this way).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.shared.kafka.client import ErrorLog, KafkaSettings, failure, require_client


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create when missing."""

    name: str
    partitions: int = 1
    replication_factor: int = 1
    config: dict[str, str] = field(default_factory=dict)


def admin_client(settings: KafkaSettings, errors: ErrorLog) -> Any:
    """An AdminClient for ``settings``."""
    require_client()
    from confluent_kafka.admin import AdminClient

    return AdminClient(settings.client_config(errors=errors))


def topic_partitions(settings: KafkaSettings, admin: Any, errors: ErrorLog) -> dict[str, int]:
    """Every topic the broker lists, with its partition count (the broker unreachable: one line)."""
    try:
        metadata = admin.list_topics(timeout=settings.timeout_s)
    except Exception as exc:
        raise failure(exc, settings, "listing topics", errors) from None
    return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def ensure_topics(settings: KafkaSettings, admin: Any, errors: ErrorLog, specs: list[TopicSpec],
                  create: bool, log: Any = None) -> dict[str, int]:
    """Create the topics of ``specs`` that do not exist (``create`` False: a ConfigError naming the first
    missing one); every topic's partition count."""
    found = topic_partitions(settings, admin, errors)
    missing = [spec for spec in specs if spec.name not in found]
    if missing and not create:
        raise ConfigError(f"kafka: topic {missing[0].name!r} does not exist and create_topics is false; create it "
                          f"(or set \"create_topics\": true)")
    if missing:
        from confluent_kafka.admin import NewTopic

        new = [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in missing]
        for name, future in admin.create_topics(new, operation_timeout=settings.timeout_s,
                                                request_timeout=settings.timeout_s).items():
            try:
                future.result()
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise failure(exc, settings, f"creating topic {name!r}", errors) from None
            if log is not None:
                log(f"kafka: created topic {name}")
        found = _wait_listed(settings, admin, errors, [s.name for s in missing])
    return {spec.name: found[spec.name] for spec in specs}


def _wait_listed(settings: KafkaSettings, admin: Any, errors: ErrorLog, names: list[str]) -> dict[str, int]:
    """The topic list once it names every topic of ``names`` (a topic just created may take a moment)."""
    deadline = time.monotonic() + settings.timeout_s
    while True:
        found = topic_partitions(settings, admin, errors)
        if all(name in found for name in names) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def read_to_end(settings: KafkaSettings, topic: str, partitions: int, errors: ErrorLog) -> list[Any]:
    """Every message of ``topic`` (``partitions`` partitions) from its start to its end as a
    ``read_committed`` consumer sees them, in offset order per partition."""
    kafka = require_client()
    consumer = kafka.Consumer(settings.client_config({
        "group.id": f"olake-read-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": True, "auto.offset.reset": "earliest"},
        errors))
    try:
        return _drain(consumer, kafka, settings, topic, partitions, errors)
    finally:
        consumer.close()


def _drain(consumer: Any, kafka: Any, settings: KafkaSettings, topic: str, partitions: int,
           errors: ErrorLog) -> list[Any]:
    """The messages of every partition up to the end the consumer reaches (its end-of-partition event:
    a broker may report no high watermark while a transaction is open)."""
    pending = set(range(partitions))
    consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in pending])
    found, deadline = [], time.monotonic() + settings.timeout_s
    while pending:
        message = consumer.poll(0.2)
        if message is None:
            if time.monotonic() > deadline:
                raise failure(TimeoutError(f"timed out reading topic {topic!r}"), settings,
                              f"reading topic {topic!r}", errors)
            continue
        deadline = time.monotonic() + settings.timeout_s
        if message.error() is not None:
            if message.error().code() == kafka.KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
                continue
            raise failure(kafka.KafkaException(message.error()), settings, f"reading topic {topic!r}", errors)
        found.append(message)
    return found
