"""What the Kafka destination keeps in its compacted topics: each stream's committed state (the truth a
run resumes from) and its catalog entry (the types a consumer decodes ``after`` with).

State topic: key ``<pipeline_id>|<namespace>.<stream>``, value the stream state JSON the commit made
durable, header ``olake-watermark`` the highest operation id applied (absent: none) and header
``olake-offsets`` the offsets of the messages the same transaction put on the stream's topic (JSON
``{"<partition>": [first, last]}``, absent when it put none): a consumer of a broker that shows aborted
transactions' messages applies only the messages some state's offsets cover. Catalog topic: key
``<namespace>.<stream>``, value ``{"stream": <the catalog entry>}``. Both are JSON whatever ``format``
says, and the latest message of a key is the one that counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import DestinationError
from olake_cli.destinations.kafka.config import DestinationSettings
from olake_cli.shared.kafka.admin import read_to_end
from olake_cli.shared.kafka.client import ErrorLog, stream_label

WATERMARK_HEADER = "olake-watermark"
OFFSETS_HEADER = "olake-offsets"


@dataclass(frozen=True)
class Committed:
    """A stream's latest committed state and the highest operation id applied with it."""

    state: dict | None
    watermark: str | None


def state_message(settings: DestinationSettings, stream: CatalogStream, merged: dict, watermark: str | None,
                  offsets: dict[str, list[int]]) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of a stream's state message (``offsets``: of the commit's data messages)."""
    headers = [] if watermark is None else [(WATERMARK_HEADER, watermark.encode())]
    if offsets:
        headers.append((OFFSETS_HEADER, orjson.dumps(offsets)))
    return settings.state_key(stream.namespace, stream.name).encode(), orjson.dumps(merged), headers


def catalog_message(stream: CatalogStream) -> tuple[bytes, bytes]:
    """(key, value) of a stream's catalog message."""
    return stream_label(stream.namespace, stream.name).encode(), catalog_value(stream)


def catalog_value(stream: CatalogStream) -> bytes:
    """The catalog message value of ``stream``."""
    return orjson.dumps({"stream": stream.to_dict()})  # (keys in their order: json_schema's is the columns')


def chunk_mark(settings: DestinationSettings, namespace: str | None, name: str, load_id: str, chunk: int, rows: int,
               offsets: dict[str, list[int]]) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
    """(key, value, headers) of the mark a sync task commits with a full-load chunk it wrote itself: key
    ``<state key>|chunk|<load id>|<chunk>``, value ``{"load_id", "chunk", "rows"}``, header ``olake-offsets``."""
    key = f"{settings.state_key(namespace, name)}|chunk|{load_id}|{chunk}".encode()
    headers = [(OFFSETS_HEADER, orjson.dumps(offsets))] if offsets else []
    return key, orjson.dumps({"load_id": load_id, "chunk": chunk, "rows": rows}), headers


def committed_states(settings: DestinationSettings, partitions: int, errors: ErrorLog) -> dict[str, Committed]:
    """The latest state of every stream of this pipeline in the state topic (by state key), the chunks of its
    load that sync tasks marked counted as done."""
    topic, prefix = settings.kafka.state_topic, f"{settings.pipeline_id}|"
    found: dict[str, Committed] = {}
    marks: set[tuple[str, str, int]] = set()  # (state key, load id, chunk)
    for message in read_to_end(settings.kafka, topic, partitions, errors):
        key = (message.key() or b"").decode("utf-8", "replace")
        if not key.startswith(prefix) or message.value() is None:
            continue
        value = _json(message, topic, key)
        if "|chunk|" in key:
            marks.add((key.split("|chunk|")[0], value["load_id"], value["chunk"]))
            continue
        watermark = dict(message.headers() or []).get(WATERMARK_HEADER)
        found[key] = Committed(value, watermark.decode() if watermark else None)
    return {key: Committed(_with_task_chunks(c.state, {(l, i) for k, l, i in marks if k == key}), c.watermark)
            for key, c in found.items()}


def _json(message: Any, topic: str, key: str) -> Any:
    try:
        return orjson.loads(message.value())
    except orjson.JSONDecodeError:
        raise DestinationError(f"kafka: topic {topic!r} partition {message.partition()} offset "
                               f"{message.offset()}: the value of {key!r} is not JSON") from None


def _with_task_chunks(state: dict, marks: set[tuple[str, int]]) -> dict:
    """``state`` with the chunks of its load that sync tasks committed marked ``succeed``."""
    inner = state.get("stream_state") or {}
    load_id = inner.get("load_id")
    if state.get("sync_type") != "full-load" or not inner.get("chunks") or not load_id:
        return state
    chunks = [{**c, "status": "succeed"} if (load_id, i) in marks else c for i, c in enumerate(inner["chunks"])]
    return {**state, "stream_state": {**inner, "chunks": chunks}}


def latest_catalog(settings: DestinationSettings, partitions: int, errors: ErrorLog) -> dict[str, bytes]:
    """The latest catalog message value of every stream in the catalog topic (by stream label)."""
    found: dict[str, bytes] = {}
    for message in read_to_end(settings.kafka, settings.kafka.catalog_topic, partitions, errors):
        if message.key() is not None and message.value() is not None:
            found[message.key().decode("utf-8", "replace")] = message.value()
    return found
