"""Positions in Kafka topics, kept in olake's state, and the operation ids of the changes read.

A stream's position (:class:`TopicCursor`) lives in its stream state's source keys: ``topic``, ``offsets``
(partition -> the next offset to read), ``awaiting`` (partition -> how many load markers the stream
applied from other partitions that this one has not reached yet: its messages before them belong to an
older copy and are skipped), ``skip_op_id`` (``start_from: {"op_id": ...}``: olake's changes at or
below it are skipped) and ``op_id`` (the checkpoint's operation id).

Operation ids: Kafka keeps order only inside a partition, and the rows of a load share one operation
id in olake's envelope, so the source numbers what it reads itself, as it reads it: ``[milliseconds,
count]`` where the milliseconds are the run's start (above every id stored before) and the count goes
up by one per change and per checkpoint. Every change thus ranks above the checkpoint before it and
below the one after it, whatever partitions it came from; the envelope's own operation id serves
``start_from`` and is not a position (the source's offsets are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from olake_cli.core.errors import StateError
from olake_cli.core.opid import OpId
from olake_cli.core.state import StreamState


@dataclass(frozen=True)
class TopicCursor:
    """Where one stream stands in its topic."""

    topic: str
    offsets: dict[int, int] = field(default_factory=dict)
    awaiting: dict[int, int] = field(default_factory=dict)
    skip_op_id: str | None = None
    last_ops: dict[int, str] = field(default_factory=dict)

    def moved(self, partition: int, offset: int) -> TopicCursor:
        """The cursor with ``partition``'s next offset at ``offset``."""
        return replace(self, offsets={**self.offsets, partition: offset})


@dataclass(frozen=True)
class KafkaPosition:
    """A checkpoint of the run's streams: each topic's cursor, and the checkpoint's operation id."""

    op: OpId
    topics: dict[str, TopicCursor]


class OpCounter:
    """The operation ids of one capture (see the module): ``[start milliseconds, count]``."""

    def __init__(self, floor: OpId | None = None) -> None:
        now = int(time.time() * 1000)
        self.base = max(now, floor.commit + 1 if floor is not None else 0)
        self.count = 0

    def next(self) -> OpId:
        """A new operation id, above every one given before."""
        self.count += 1
        return OpId(self.base, self.count)


def cursor_of(ss: StreamState | None) -> tuple[TopicCursor, OpId] | None:
    """The cursor and checkpoint operation id a stream state holds, or None (no Kafka position)."""
    if ss is None or "offsets" not in ss.source or "topic" not in ss.source:
        return None
    keys = ss.source
    try:
        cursor = TopicCursor(str(keys["topic"]), {int(p): int(o) for p, o in keys["offsets"].items()},
                             {int(p): int(n) for p, n in keys.get("awaiting", {}).items()}, keys.get("skip_op_id"), {int(p): str(o) for p, o in keys.get("last_ops", {}).items()})
        op = OpId.from_json(keys.get("op_id", [0, 0]))
    except (TypeError, ValueError, AttributeError):
        raise StateError(f"stream '{ss.stream_name}': a Kafka position is 'topic', 'offsets' (partition -> next "
                         "offset), 'awaiting', 'last_ops' and 'op_id'") from None
    return cursor, op


def with_cursor(ss: StreamState, cursor: TopicCursor, op: OpId) -> StreamState:
    """A copy of ``ss`` holding ``cursor`` and checkpoint ``op``."""
    new = ss.copy()
    new.source.update(topic=cursor.topic, offsets={str(p): o for p, o in sorted(cursor.offsets.items())},
                      awaiting={str(p): n for p, n in sorted(cursor.awaiting.items()) if n},
                      last_ops={str(p): o for p, o in sorted(cursor.last_ops.items())}, op_id=op.to_json())
    if cursor.skip_op_id is not None:
        new.source["skip_op_id"] = cursor.skip_op_id
    else:
        new.source.pop("skip_op_id", None)
    return new
