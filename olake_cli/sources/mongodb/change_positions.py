"""MongoDB change positions: a resume token plus the operation id it covers.

Operation ids come from the cluster time: ``(seconds << 32 | increment, n)``, where ``n`` counts the
changes sharing that cluster time (the operations of one transaction).

A token taken from an empty batch (the post-batch resume token) has no change of its own: it is
paired with a cluster time read before that batch was asked for, and the cluster time the token itself
says it resumes at, whichever is smaller. An empty batch does not mean the stream has read the whole
log: a server still reading through many entries its filter drops (writes to collections it does not
follow) returns empty batches whose tokens lie inside them, behind changes it has yet to return; and a
replica set's majority-committed point may lag the time ``hello`` reports. Either way a token paired
with a time it has not reached would have a change in between taken for one already read, and lost.
MongoDB's tokens (``_data`` = hex KeyString: type byte 130, then the cluster time as 8 big-endian
bytes, the format MongoDB's own Kafka and Spark connectors read) and SecantusDB's (``_data`` = hex of
one BSON document whose ``t`` is the cluster time of the log entry its scan reached) say it; a token
in any other form says nothing, so it covers no more than the last change read (or where the stream
started).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olake_cli.core.opid import OpId

_KEYSTRING_TIMESTAMP = 0x82  # KeyString type byte of a Timestamp


@dataclass(frozen=True)
class MongoPosition:
    """A change-stream position: the resume token (its ``_data`` text) and the op id it covers."""

    token: str
    op: OpId


def cluster_op(ts: Any, seq: int = 0) -> OpId:
    """The operation id of a BSON Timestamp cluster time (and a 1-based sequence within it)."""
    return OpId((ts.time << 32) | ts.inc, seq)


def token_time(token: str) -> int | None:
    """The cluster time (``seconds << 32 | increment``) a resume token resumes at: MongoDB's KeyString
    form, or SecantusDB's BSON document; None for a token in another form (another server's)."""
    try:
        raw = bytes.fromhex(token)
    except ValueError:
        return None
    if len(raw) >= 5 and int.from_bytes(raw[:4], "little") == len(raw):
        return _bson_token_time(raw)
    if len(raw) < 9 or raw[0] != _KEYSTRING_TIMESTAMP:
        return None
    return int.from_bytes(raw[1:9], "big")


def _bson_token_time(raw: bytes) -> int | None:
    """The ``t`` Timestamp of a token that is one BSON document (SecantusDB's), or None."""
    import bson
    from bson.errors import BSONError

    try:
        when = bson.decode(raw).get("t")
    except (BSONError, ValueError, TypeError):
        return None
    return (when.time << 32) | when.inc if isinstance(when, bson.Timestamp) else None


def idle_position(token: str, read_before: OpId, last: MongoPosition | None,
                  start: OpId | None = None) -> MongoPosition:
    """The position of a post-batch resume ``token`` from a batch asked for after the cluster time
    ``read_before`` was read (see the module's docstring), never below the last change read (``last``).
    A token whose time is unknown covers the last change read, else ``start`` (where the stream
    started); a stream just opened at the log's end (neither given) covers ``read_before``."""
    resumes_at = token_time(token)
    if resumes_at is None:  # no more than what is known to be read
        return MongoPosition(token, last.op if last is not None else start if start is not None else read_before)
    op = OpId(min(read_before.commit, resumes_at), 0)
    return MongoPosition(token, op if last is None else max(last.op, op))
