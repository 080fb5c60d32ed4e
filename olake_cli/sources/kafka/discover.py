"""Discovery: one stream per topic. A topic olake's Kafka destination wrote is described by its catalog
topic (``{topic_prefix}_catalog``: each stream's catalog entry, the original json_schema, types and keys
included), so its stream comes back as it was; any other topic is a message stream (``records``)."""

from __future__ import annotations

from typing import Any

import orjson

from olake_cli.core.errors import ProtocolError
from olake_cli.shared.kafka.admin import read_to_end
from olake_cli.shared.kafka.client import ErrorLog
from olake_cli.sources.kafka.connection import KafkaSourceSettings, cluster_topics, open_consumer, selected_topics
from olake_cli.sources.kafka.records import ENVELOPE, KIND, MESSAGES, TOPIC, message_schema


def discover_catalog(settings: KafkaSourceSettings) -> dict[str, Any]:
    """The catalog object (``{"streams": [...]}``) of every topic the config names."""
    with open_consumer(settings) as (consumer, errors):
        found = cluster_topics(consumer, settings, errors)
    topics = selected_topics(settings, found)
    described = olake_streams(settings, found)
    return {"streams": [described[t] if t in described else message_stream(settings, t) for t in topics]}


def olake_streams(settings: KafkaSourceSettings, found: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Topic -> the catalog entry of the stream olake wrote there (from the catalog topic; none without it)."""
    kafka = settings.kafka
    name = kafka.catalog_topic
    if name not in found:
        return {}
    latest: dict[bytes, bytes | None] = {}
    for message in read_to_end(kafka, name, len(found[name]), ErrorLog()):
        latest[message.key()] = message.value()
    streams = {}
    for key, value in latest.items():
        if value is None:
            continue
        entry = _entry(value, name, key)
        topic = kafka.topic_of(entry.get("namespace"), entry["name"])
        streams[topic] = {**entry, "supported_sync_modes": ["cdc"], "sync_mode": "cdc", "selected": True,
                          "default_cursor_field": [], "x-olake": {**entry.get("x-olake", {}), TOPIC: topic,
                                                                   KIND: ENVELOPE}}
        for choice in ("cursor_field", "cursor_lookback", "skip_initial_load", "row_filter", "transform",
                       "primary_key"):
            streams[topic].pop(choice, None)
    return streams


def _entry(value: bytes, topic: str, key: bytes | None) -> dict[str, Any]:
    """A catalog-topic value's stream entry; a ProtocolError naming the message when it is not one."""
    try:
        entry = orjson.loads(value)["stream"]
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) \
                or not isinstance(entry.get("json_schema"), dict):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise ProtocolError(f"kafka: topic '{topic}' key {key!r}: not an olake catalog entry "
                            "({\"stream\": {...}})") from None
    return entry


def message_stream(settings: KafkaSourceSettings, topic: str) -> dict[str, Any]:
    """The message stream of a topic olake did not write (see ``records``)."""
    return {"name": topic, "namespace": settings.namespace, "json_schema": message_schema(settings.message_values),
            "supported_sync_modes": ["cdc"], "source_defined_primary_key": [["partition"], ["offset"]],
            "default_cursor_field": [], "selected": True, "sync_mode": "cdc",
            "x-olake": {TOPIC: topic, KIND: MESSAGES}}
