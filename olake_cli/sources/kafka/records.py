"""One stream's messages as changes: olake's envelope applied as changes, other topics as message rows.

On a topic olake's destination wrote (its *envelope*, ``shared.kafka.envelope``): ``r`` and ``c`` rows
become inserts, ``u`` updates (with the columns listed in ``toast_unchanged`` left out, so the
destination keeps their values), ``d`` deletes by key, and tombstones are skipped. A load marker becomes
a truncate: the rows that follow it replace the stream's contents (as does a truncate marker). The destination writes each marker to every partition: the first
copy read empties the stream, and the messages of another partition that come before its own copy belong
to the older contents and are skipped (``TopicCursor.awaiting``).

On any other topic each message is one inserted row of the *message stream*: ``partition``,
``offset`` (the key), ``timestamp``, ``key``, ``value`` and ``headers``. Keys and values are text or
bytes (``message_values``); headers a JSON array of ``[name, value]`` pairs.
"""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import replace
from typing import Any

import orjson

from olake_cli.core.calendar_text import timestamp_text
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import Change
from olake_cli.core.errors import ProtocolError
from olake_cli.core.row_metadata import COMMIT_TS, OP, TOAST
from olake_cli.shared.kafka.envelope import decode_envelope, is_marker
from olake_cli.sources.kafka.positions import OpCounter, TopicCursor

TOPIC, KIND = "kafka_topic", "kafka_kind"  # the ``x-olake`` keys naming a stream's topic and kind
ENVELOPE, MESSAGES = "envelope", "messages"  # the two kinds of stream
_OPS = {"r": "c", "c": "c", "u": "u", "d": "d"}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def topic_of(stream: CatalogStream) -> str:
    """The topic a stream reads (discover names it in ``x-olake``; else the stream's name)."""
    return str(stream.x_olake.get(TOPIC, stream.name))


def where(topic: str, partition: int, offset: int) -> str:
    """A message's place, as error lines name it."""
    return f"kafka: topic '{topic}' partition {partition} offset {offset}"


class StreamMessages:
    """Turns one stream's messages into changes, moving its cursor past each."""

    def __init__(self, stream: CatalogStream, cursor: TopicCursor, partitions: list[int], value_format: str,
                 message_values: str, ops: OpCounter, changes: list[Change]) -> None:
        self.stream, self.cursor, self.partitions, self.ops = stream, cursor, partitions, ops
        self.value_format, self.message_values = value_format, message_values
        self.kind = stream.x_olake.get(KIND, MESSAGES)
        self.changes = changes  # where its changes go (shared by the streams of a read, in read order)

    def take(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
             timestamp_ms: int | None, headers: list | None) -> None:
        """One message: its change (if any) added to ``changes``, the cursor moved past it."""
        if self.kind == MESSAGES:
            self._add(self._message_row(partition, offset, key, value, timestamp_ms, headers))
        elif value is not None:  # (a tombstone follows a delete: nothing to apply)
            self._envelope(partition, offset, value)
        self.cursor = self.cursor.moved(partition, offset + 1)

    def _add(self, data: dict[str, Any]) -> None:
        self.changes.append(Change(self.stream.key, self.ops.next(), data))

    def _envelope(self, partition: int, offset: int, value: bytes) -> None:
        topic = self.cursor.topic
        envelope = decode_envelope(value, _format_of(value, self.value_format), where(topic, partition, offset))
        cursor = self.cursor
        if is_marker(envelope):
            self._marker(partition)
            return
        if cursor.awaiting.get(partition):
            return  # written before this partition's marker of the load the stream applied: an older copy
        op_id, op = envelope["op_id"], _OPS[envelope["op"]]
        if op_id is not None and envelope["op"] != "r":  # (a load's rows all rank at its position)
            last = cursor.last_ops.get(partition)
            if (last is not None and op_id <= last) or (cursor.skip_op_id is not None and op_id <= cursor.skip_op_id):
                return  # a replay (a transaction written again after a kill), or before start_from
            self.cursor = replace(cursor, last_ops={**cursor.last_ops, partition: op_id})
        data = dict(envelope["key"] or {}) if op == "d" else dict(envelope["after"])
        data[OP] = op
        data[COMMIT_TS] = _micros(envelope["commit_ts"], where(topic, partition, offset))
        if envelope.get("toast_unchanged"):
            data[TOAST] = list(envelope["toast_unchanged"])
        self._add(data)

    def _marker(self, partition: int) -> None:
        """A load or truncate marker: this partition's copy of one applied already, or a new one (a truncate;
        every other partition awaits its copy)."""
        awaiting = dict(self.cursor.awaiting)
        if awaiting.get(partition):
            awaiting[partition] -= 1
        else:
            self._add({OP: "t", COMMIT_TS: None})
            for other in self.partitions:
                if other != partition:
                    awaiting[other] = awaiting.get(other, 0) + 1
        self.cursor = replace(self.cursor, awaiting=awaiting)

    def _message_row(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
                     timestamp_ms: int | None, headers: list | None) -> dict[str, Any]:
        place = where(self.cursor.topic, partition, offset)
        micros = None if timestamp_ms is None else timestamp_ms * 1000
        pairs = [[name, self._bytes(raw, place, f"header '{name}'")] for name, raw in headers or []]
        return {"partition": partition, "offset": offset,
                "timestamp": None if micros is None else timestamp_text(micros, True),
                "key": self._bytes(key, place, "key"), "value": self._bytes(value, place, "value"),
                "headers": orjson.dumps(pairs).decode(), OP: "c", COMMIT_TS: micros}

    def _bytes(self, raw: bytes | None, place: str, what: str) -> str | None:
        """A key, value or header value as its wire value (text, or base64 of the bytes)."""
        if raw is None:
            return None
        if self.message_values == "bytes":
            return base64.b64encode(raw).decode()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError(f"{place}: the {what} is not UTF-8 text (set message_values to \"bytes\" to "
                                "read such topics)") from None


def _format_of(value: bytes, value_format: str) -> str:
    """The envelope format of ``value`` (``auto``: JSON when it starts with ``{``)."""
    if value_format != "auto":
        return value_format
    return "json" if value[:1] == b"{" else "msgpack"


def _micros(text: str | None, place: str) -> int | None:
    """An envelope's ``commit_ts`` as microseconds since 1970."""
    if text is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ProtocolError(f"{place}: commit_ts {text!r} is not an ISO 8601 time") from None
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)


def message_schema(message_values: str) -> dict[str, Any]:
    """The json_schema of a message stream (see the module)."""
    value = {"type": ["string", "null"], "x-olake-type": "bytes" if message_values == "bytes" else "string"}
    return {"type": "object", "properties": {
        "partition": {"type": "integer", "x-olake-type": "int32"},
        "offset": {"type": "integer", "x-olake-type": "int64"},
        "timestamp": {"type": ["string", "null"], "format": "date-time", "x-olake-type": "timestamptz"},
        "key": dict(value), "value": dict(value),
        "headers": {"type": ["string", "null"], "x-olake-type": "json"},
    }}
