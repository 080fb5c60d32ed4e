"""Positions in DynamoDB Streams, and the operation ids of stream records.

A table's position (:class:`TableCursor`) is kept in its stream state: ``cursor_field`` is the time
before which every record has been read (UTC, to the millisecond: ``2024-05-01T10:00:00.000Z``; its age
decides the safe zone), ``stream_arn`` the table's stream, ``shards`` maps each shard read so far to the
sequence number of its last committed record (``"end"`` once a closed shard was read to its end) and
``floor_ms`` is the time before which records are dropped (the INIT_SYNC's scan holds them) and
``replay_until_ms`` the time the INIT_SYNC began: records made before it replay what the scan already
holds, and are counted apart as such. ``op_id`` orders checkpoints.

Operation ids: a record's is its sequence number (up to 127 bits) in the upper half of the op-id space,
``[2^63 + (n >> 64), n & (2^64 - 1)]``, so every replay gives it the same id and later records of an
item (same shard, or a child shard) rank higher. Checkpoints, and the rows of an INIT_SYNC, rank in the
lower half (``[milliseconds, count]``): below every record, so replayed records always win over the
scan's rows, and the pipeline's own drop of already-committed changes never drops a record (the
capture resumes each shard after its committed sequence number itself).
"""

from __future__ import annotations

import calendar
import datetime as dt
from dataclasses import dataclass, field

from olake_cli.core.errors import SourceError, StateError
from olake_cli.core.opid import OpId
from olake_cli.core.state import StreamState

END = "end"
_RECORD_BAND = 1 << 63
_LOW64 = (1 << 64) - 1


@dataclass(frozen=True)
class TableCursor:
    """Where change capture stands in one table's stream."""

    stream_arn: str
    shards: dict[str, str] = field(default_factory=dict)
    since_ms: int = 0
    floor_ms: int = 0
    replay_until_ms: int = 0


@dataclass(frozen=True)
class DynamoPosition:
    """A checkpoint of the run's tables: each table's cursor, and the checkpoint's op id."""

    op: OpId
    tables: dict[str, TableCursor]


def record_op(sequence_number: str) -> OpId:
    """The operation id of a stream record (see the module)."""
    number = int(sequence_number)
    if not 0 <= number < _RECORD_BAND << 64:
        raise SourceError(f"dynamodb: stream record sequence number {sequence_number} is beyond 127 bits; "
                          "its operation id cannot be formed")
    return OpId(_RECORD_BAND | (number >> 64), number & _LOW64)


def cursor_of(ss: StreamState | None) -> tuple[TableCursor, OpId] | None:
    """The cursor and checkpoint op id a stream state holds, or None (no change position)."""
    if ss is None or ss.sync_type == "incremental" or not isinstance(ss.cursor_field, str) \
            or "stream_arn" not in ss.source:
        return None
    keys = ss.source
    try:
        cursor = TableCursor(str(keys["stream_arn"]), {str(k): str(v) for k, v in keys["shards"].items()},
                             time_ms(ss.cursor_field), int(keys["floor_ms"]), int(keys.get("replay_until_ms", 0)))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise StateError(f"stream '{ss.stream_name}': a DynamoDB position is a time ({time_text(0)}) in "
                         "cursor_field with 'stream_arn', 'shards' and 'floor_ms'") from None
    return cursor, OpId.from_json(keys.get("op_id", [0, 0]))


def with_cursor(ss: StreamState, cursor: TableCursor, op: OpId) -> StreamState:
    """A copy of ``ss`` holding ``cursor`` and checkpoint ``op``."""
    new = ss.copy()
    new.cursor_field = time_text(cursor.since_ms)
    new.source.update(stream_arn=cursor.stream_arn, shards=dict(cursor.shards), floor_ms=cursor.floor_ms,
                      replay_until_ms=cursor.replay_until_ms, op_id=op.to_json())
    return new


def time_text(ms: int) -> str:
    """Milliseconds since 1970 as UTC text to the millisecond (``1970-01-01T00:00:00.000Z``)."""
    moment = dt.datetime.fromtimestamp(ms // 1000, dt.UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def time_ms(text: str) -> int:
    """The milliseconds of :func:`time_text`'s output (exact)."""
    moment = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    return calendar.timegm(moment.timetuple()) * 1000 + moment.microsecond // 1000
