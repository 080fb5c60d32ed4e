"""A table's stream as shards: listed in lineage order, each read from a position up to a time.

Shards split and close; a closed shard's records precede its children's, so shards are read parents
first. A closed shard is read until it ends (no next iterator); an open shard until it holds nothing
more (``EMPTY_READS`` empty replies in a row) or its next record was created after the run started, so
a run is bounded. Iterators expire after 15 minutes: an expired one is taken again after the last
record read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from olake_cli.sources.dynamodb.connection import DynamoSettings, aws_error, error_code

EMPTY_READS = 3
RECORDS_PER_READ = 1000
TRIMMED = "TrimmedDataAccessException"
EXPIRED = "ExpiredIteratorException"
MISSING = "ResourceNotFoundException"


class ShardLost(Exception):
    """A shard's records after a position are gone (trimmed), or the shard itself is."""

    def __init__(self, shard_id: str, reason: str) -> None:
        super().__init__(reason)
        self.shard_id, self.reason = shard_id, reason


@dataclass(frozen=True)
class Shard:
    """A shard of a stream: its id and its parent's (None for a root)."""

    shard_id: str
    parent_id: str | None


def list_shards(client, settings: DynamoSettings, stream_arn: str) -> list[Shard]:
    """Every shard the stream holds now (closed shards disappear 24 hours after they close)."""
    shards: list[Shard] = []
    request: dict[str, Any] = {"StreamArn": stream_arn}
    try:
        while True:
            description = client.describe_stream(**request)["StreamDescription"]
            shards += [Shard(s["ShardId"], s.get("ParentShardId")) for s in description.get("Shards", [])]
            if not description.get("LastEvaluatedShardId"):
                return shards
            request["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]
    except Exception as exc:
        raise aws_error(settings, exc, f"describing stream {stream_arn}") from None


def lineage_order(shards: list[Shard]) -> list[Shard]:
    """The shards with every parent before its children (a parent no longer listed counts as read)."""
    listed = {s.shard_id for s in shards}
    children: dict[str | None, list[Shard]] = {}
    for shard in shards:
        parent = shard.parent_id if shard.parent_id in listed else None
        children.setdefault(parent, []).append(shard)
    ordered, todo = [], list(reversed(children.get(None, [])))
    while todo:
        shard = todo.pop()
        ordered.append(shard)
        todo += reversed(children.get(shard.shard_id, []))
    return ordered


def shard_iterator(client, settings: DynamoSettings, stream_arn: str, shard_id: str, after: str | None) -> str:
    """An iterator after sequence number ``after`` (None: at the shard's oldest record); ShardLost when
    those records or the shard are gone."""
    request = {"StreamArn": stream_arn, "ShardId": shard_id}
    if after is None:
        request["ShardIteratorType"] = "TRIM_HORIZON"
    else:
        request.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
    try:
        return client.get_shard_iterator(**request)["ShardIterator"]
    except Exception as exc:
        code = error_code(exc)
        if code == TRIMMED:
            raise ShardLost(shard_id, f"the stream no longer holds the records after sequence number {after} of "
                                      f"shard {shard_id} ({TRIMMED})") from None
        if code == MISSING:
            raise ShardLost(shard_id, f"shard {shard_id} no longer exists in the stream") from None
        raise aws_error(settings, exc, f"opening shard {shard_id}") from None


def read_shard(client, settings: DynamoSettings, stream_arn: str, shard_id: str, after: str | None,
               upto: dt.datetime) -> Iterator[tuple[list[dict], bool]]:
    """Pages of the shard's records after ``after`` created up to ``upto``, each with whether the shard
    ended (closed and read whole) with it; ShardLost as :func:`shard_iterator`."""
    iterator = shard_iterator(client, settings, stream_arn, shard_id, after)
    empty = 0
    while iterator is not None and empty < EMPTY_READS:
        try:
            reply = client.get_records(ShardIterator=iterator, Limit=RECORDS_PER_READ)
        except Exception as exc:
            if error_code(exc) != EXPIRED:
                if error_code(exc) == TRIMMED:
                    raise ShardLost(shard_id, f"records of shard {shard_id} were trimmed while it was read "
                                              f"({TRIMMED})") from None
                raise aws_error(settings, exc, f"reading shard {shard_id}") from None
            iterator = shard_iterator(client, settings, stream_arn, shard_id, after)
            continue
        records = reply.get("Records") or []
        kept = [r for r in records if r["dynamodb"]["ApproximateCreationDateTime"] <= upto]
        if kept:
            after = kept[-1]["dynamodb"]["SequenceNumber"]
        iterator = reply.get("NextShardIterator")
        if len(kept) < len(records):  # the rest was made after the run began: the next run reads it
            yield kept, False
            return
        empty = 0 if records else empty + 1
        yield kept, iterator is None
