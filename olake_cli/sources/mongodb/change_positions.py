"""MongoDB change positions: a resume token plus the operation id it covers.

Operation ids come from the cluster time: ``(seconds << 32 | increment, n)``, where ``n`` counts the
changes sharing that cluster time (the operations of one transaction).

A token taken from an empty batch (the post-batch resume token) has no change of its own: it is
paired with a cluster time read before that batch was asked for, and ends at or past it. MongoDB's
tokens (``_data`` = hex KeyString: type byte 130, then the cluster time as 8 big-endian bytes, the
format MongoDB's own Kafka and Spark connectors read) also say the cluster time they resume at: the
smaller of the two is taken, so a replica set whose majority-committed point lags the time ``hello``
reports never pairs a token with a time it has not reached (a change in between would be taken for
one already read).
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
    """The cluster time (``seconds << 32 | increment``) a MongoDB resume token resumes at, or None when
    the token is not in MongoDB's KeyString form (another server's, or an older version's)."""
    try:
        raw = bytes.fromhex(token)
    except ValueError:
        return None
    if len(raw) < 9 or raw[0] != _KEYSTRING_TIMESTAMP or int.from_bytes(raw[:4], "little") == len(raw):
        return None  # (a token that is one whole BSON document, as SecantusDB's, is not a KeyString)
    return int.from_bytes(raw[1:9], "big")


def idle_position(token: str, read_before: OpId, last: MongoPosition | None) -> MongoPosition:
    """The position of a post-batch resume ``token`` from a batch asked for after the cluster time
    ``read_before`` was read (see the module's docstring), never below the last change read (``last``)."""
    resumes_at = token_time(token)
    op = OpId(read_before.commit if resumes_at is None else min(read_before.commit, resumes_at), 0)
    return MongoPosition(token, op if last is None else max(last.op, op))
