"""DynamoDB change capture against a real endpoint (moto's server), in-process: the safe zone's lost
positions, and what a bounded run reads.

moto keeps one shard per table and never trims stream records, so the lost-position paths are reached
through the stored position: a time (``cursor_field``) older than ``safe_zone_hours``, a shard id the stream does
not have (a real stream drops closed shards 24 hours after they close), a stream ARN that is not the
table's (streams disabled and enabled again: moto refuses to re-enable a stream). A trimmed iterator
(``TrimmedDataAccessException``, which moto never raises) takes the same path as a missing shard:
``shards.ShardLost`` -> ``handle_lost_position``.
"""

from __future__ import annotations

import time

import pytest

from olake_cli.core.catalog import parse_catalog
from olake_cli.core.errors import PositionLostError
from olake_cli.core.state import State, StreamState
from olake_cli.sources.dynamodb.positions import END, TableCursor, cursor_of
from olake_cli.sources.dynamodb.source import DynamoSource
from tests.support.dynamo import create_table, put_items


def _capture(moto_server, table: str, **extra):
    source = DynamoSource(moto_server.config(tables=[table], **extra))
    stream = parse_catalog(source.discover()).streams[0]
    logs: list[str] = []
    return source.change_capture([stream], logs.append), stream, logs


def _synced_state(capture, stream) -> State:
    """A state in SYNC after a first change-capture run from a fresh start position."""
    state = State()
    capture.preflight(state)
    ss = capture.with_position(StreamState("cdc", stream.name, stream.namespace), capture.start_position())
    state.upsert(ss)
    for batch in capture.read([stream], state):
        if batch.position is not None:
            state.upsert(capture.with_position(state.find(stream.namespace, stream.name), batch.position))
    return state


def _edit_cursor(state: State, stream, **changes) -> None:
    ss = state.find(stream.namespace, stream.name)
    cursor, op = cursor_of(ss)
    fields = {"stream_arn": cursor.stream_arn, "shards": cursor.shards, "since_ms": cursor.since_ms,
              "floor_ms": cursor.floor_ms, **changes}
    from olake_cli.sources.dynamodb.positions import with_cursor

    state.upsert(with_cursor(ss, TableCursor(**fields), op))


@pytest.fixture()
def synced(moto_server, dynamo_table):
    create_table(moto_server.client(), dynamo_table)
    put_items(moto_server.client(), dynamo_table, [{"pk": {"S": "a"}, "sk": {"N": str(i)}} for i in range(5)])
    capture, stream, logs = _capture(moto_server, dynamo_table)
    state = _synced_state(capture, stream)
    logs.clear()
    return capture, stream, logs, state


def test_a_run_reads_every_record_and_stores_the_shard_position(synced, moto_server, dynamo_table):
    capture, stream, logs, state = synced
    cursor, op = cursor_of(state.find(stream.namespace, stream.name))
    (shard, mark), = cursor.shards.items()
    assert mark != END and int(mark) > 0  # an open shard: the last record's sequence number
    assert time.time() * 1000 - cursor.since_ms < 60_000
    capture.preflight(state)  # a fresh position passes
    assert state.find(stream.namespace, stream.name) is not None and not logs
    moto_server.client().put_item(TableName=dynamo_table, Item={"pk": {"S": "b"}, "sk": {"N": "9"}})
    changes = [run for batch in capture.read([stream], state) for run in batch.runs]
    assert [len(run) for run in changes] == [1]  # only the record after the stored sequence number
    assert changes[0].op.to_pylist() == ["c"] and changes[0].data["pk"].to_pylist() == ['"b"']


@pytest.mark.parametrize("change, reason", [
    ({"since_ms": int(time.time() * 1000) - 21 * 3_600_000}, "hours old, beyond safe_zone_hours = 20"),
    ({"shards": {"shardId-00000000000000000000-00000000": "1100000000017454423010"}},
     "shard shardId-00000000000000000000-00000000 of the stored position no longer exists"),
    ({"stream_arn": "arn:aws:dynamodb:us-east-1:123456789012:table/x/stream/2000-01-01T00:00:00.000"},
     "that the position belongs to"),
])
def test_a_lost_position_runs_init_sync_again_or_fails(synced, moto_server, dynamo_table, change, reason):
    capture, stream, logs, state = synced
    _edit_cursor(state, stream, **change)
    kept = State(streams=[s.copy() for s in state.streams])
    capture.preflight(state)
    assert state.find(stream.namespace, stream.name) is None  # the next plan is a new INIT_SYNC
    assert len(logs) == 1 and reason in logs[0] and "re-syncing with a fresh full load" in logs[0]

    failing, _, _ = _capture(moto_server, dynamo_table, on_position_lost="fail")
    with pytest.raises(PositionLostError, match="on_position_lost = fail") as raised:
        failing.preflight(kept)
    assert reason in str(raised.value)
    assert kept.find(stream.namespace, stream.name) is not None


def test_a_lost_position_under_init_sync_skip_fails_instead_of_emptying_the_table(synced, moto_server, dynamo_table):
    """With init_sync: skip a re-sync would plan no INIT_SYNC: the table would start again empty. The run
    stops instead (whatever on_position_lost says), saying how to copy the table, and the state is kept."""
    _, stream, _, state = synced
    _edit_cursor(state, stream, since_ms=int(time.time() * 1000) - 21 * 3_600_000)
    skipping, _, logs = _capture(moto_server, dynamo_table, init_sync="skip")
    with pytest.raises(PositionLostError, match="init_sync = skip") as raised:
        skipping.preflight(state)
    assert "hours old, beyond safe_zone_hours = 20" in str(raised.value) and "init_sync to run" in str(raised.value)
    assert state.find(stream.namespace, stream.name) is not None and not logs


def test_a_position_that_ages_beyond_the_safe_zone_during_init_sync_is_lost_not_skipped(moto_server, dynamo_table):
    """The start position is taken before INIT_SYNC; a scan that outlasts the safe zone leaves it too old
    when the stream is first read (from its oldest record: nothing would say that records were trimmed).
    The table runs INIT_SYNC again with a line saying why, or the run fails; no record is read."""
    create_table(moto_server.client(), dynamo_table)
    put_items(moto_server.client(), dynamo_table, [{"pk": {"S": "a"}, "sk": {"N": str(i)}} for i in range(5)])
    for on_lost in ("resync", "fail"):
        capture, stream, logs = _capture(moto_server, dynamo_table, on_position_lost=on_lost)
        state = State()
        capture.preflight(state)  # the run's start: the position is fresh
        state.upsert(capture.with_position(StreamState("cdc", stream.name, stream.namespace),
                                           capture.start_position()))
        _edit_cursor(state, stream, since_ms=int(time.time() * 1000) - 21 * 3_600_000)  # a 21-hour INIT_SYNC
        if on_lost == "fail":
            with pytest.raises(PositionLostError, match="hours old, beyond safe_zone_hours = 20"):
                list(capture.read([stream], state))
            continue
        batches = list(capture.read([stream], state))
        assert [run for batch in batches for run in batch.runs] == []
        (reason,) = [r for batch in batches for r in batch.resync.values()]
        assert "change position lost: the stored position is 21.0 hours old, beyond safe_zone_hours = 20" in reason
        assert "runs INIT_SYNC again" in reason
