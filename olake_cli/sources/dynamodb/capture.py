"""SYNC: change capture from each table's DynamoDB stream, with the safe zone (seeds/003).

Before any INIT_SYNC the capture takes the start position: the time, less ``replay_margin_minutes``
(with ``init_sync: skip``: the time itself, to the second: the stream's current end). The first SYNC
reads every shard from its oldest record and drops those created before that time; later runs resume
each shard after its committed sequence number. A run reads each table's shards in lineage order up to
the time it began, then stops. INSERT, MODIFY and REMOVE become ``c``, ``u`` and ``d`` records with the
new image (the key for a REMOVE) and the record's operation id (``positions``), so replays converge.

Records made before the INIT_SYNC began replay what its scan holds; they are marked as such
(``ChangeRun.replayed``) so that the run's report counts them apart from the changes since.

The safe zone: a stored position older than ``safe_zone_hours`` (checked when the run starts, and
again when a table's stream is read: an INIT_SYNC may take longer), a stream that is not the one the
position belongs to, a shard that no longer exists or whose records after the position were trimmed
(``TrimmedDataAccessException``): the table runs INIT_SYNC again (``on_position_lost: resync``, with a
line saying why) or the run fails (``fail``).

A record whose numbers outgrow their column (``drift``) widens the stream in place: the batch
announces it before its changes, and later checkpoints record it in the state (``core.schema_drift``).
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace
from typing import Any
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import ConfigError, PositionLostError, SourceError
from olake_cli.core.follow import Follow
from olake_cli.core.schema_drift import changed_columns, column_type, record_in_state, widened
from olake_cli.core.opid import OpId
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.position_lost import handle_lost_position
from olake_cli.core.record_lines import json_texts
from olake_cli.core.state import State, StreamState
from olake_cli.sources.dynamodb.batches import items_to_batch
from olake_cli.sources.dynamodb.connection import DynamoSettings
from olake_cli.sources.dynamodb.drift import widened_schema
from olake_cli.sources.dynamodb.positions import (
    END, DynamoPosition, TableCursor, cursor_of, record_op, with_cursor,
)
from olake_cli.sources.dynamodb.shards import ShardLost, lineage_order, list_shards, read_shard, shard_iterator
from olake_cli.sources.dynamodb.tables import describe_table

_OPS = {"INSERT": "c", "MODIFY": "u", "REMOVE": "d"}
BATCH_CHANGES = 1000
_HOUR_MS = 3_600_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class DynamoChangeCapture:
    """Reads the streams of the run's ``cdc`` tables (``core.contracts.ChangeCapture``)."""

    def __init__(self, settings: DynamoSettings, streams: list[CatalogStream], log: Callable[[str], None]) -> None:
        self.settings, self.streams, self.log = settings, streams, log
        self.stream_arns: dict[str, str] = {}
        self._start: DynamoPosition | None = None
        self._checkpoints = 0
        self._op_base = 0
        self.widened: dict[tuple, CatalogStream] = {}  # streams widened in place by this run's changes

    # -- positions ---------------------------------------------------------------------------

    def position_of(self, ss: StreamState | None) -> DynamoPosition | None:
        """The position a stream state holds (its table's cursor), or None."""
        held = cursor_of(ss)
        return None if held is None else DynamoPosition(held[1], {ss.stream_name: held[0]})

    def with_position(self, ss: StreamState, position: DynamoPosition) -> StreamState:
        """A copy of ``ss`` holding its table's cursor of ``position``."""
        cursor = position.tables.get(ss.stream_name)
        if ss.key in self.widened:
            ss = record_in_state(ss, self.widened[ss.key])
        return ss.copy() if cursor is None else with_cursor(ss, cursor, position.op)

    def position_op(self, position: DynamoPosition) -> OpId:
        """The checkpoint's op id (below every record's; see ``positions``)."""
        return position.op

    def start_position(self) -> DynamoPosition:
        """The position taken by :meth:`preflight`, before any INIT_SYNC."""
        assert self._start is not None, "preflight() runs first"
        return self._start

    def load_marks(self, session) -> dict[str, Any]:
        """Nothing beyond the start position: records made during the scan are replayed after it."""
        return {}

    def next_op(self) -> OpId:
        """A checkpoint op id above every one stored (milliseconds, then a count)."""
        self._checkpoints += 1
        return OpId(max(_now_ms(), self._op_base), self._checkpoints)

    # -- preflight ---------------------------------------------------------------------------

    def preflight(self, state: State, pipeline: PipelineIdentity | None = None) -> None:
        """Require streams of new images, apply the safe zone to stored positions, take the start position
        (DynamoDB Streams are read by any number of pipelines: ``pipeline`` claims nothing)."""
        client = self.settings.client()
        streams_client = self.settings.client("dynamodbstreams")
        now = _now_ms()
        held = {s.key: self.position_of(state.find(s.namespace, s.name)) for s in self.streams}
        self._op_base = max([now] + [p.op.commit + 1 for p in held.values() if p is not None])
        for stream in self.streams:
            info = describe_table(client, self.settings, stream.name)
            problem = info.stream_problem()
            if problem is not None:
                raise ConfigError(f"dynamodb: {problem}")
            self.stream_arns[stream.name] = info.stream_arn
            position = held[stream.key]
            if position is not None:
                reason = self._position_problem(streams_client, position.tables[stream.name], info.stream_arn, now)
                if reason is not None:
                    self.refuse_empty_resync(stream.label, reason)
                    handle_lost_position(state, stream.key, stream.label, reason, self.settings.on_position_lost,
                                         self.log)
        scan = self.settings.init_sync == "run"
        floor = now - self.settings.replay_margin_minutes * 60_000 if scan else now // 1000 * 1000
        self._start = DynamoPosition(self.next_op(), {name: TableCursor(arn, {}, floor, floor, now if scan else 0)
                                                       for name, arn in self.stream_arns.items()})

    def refuse_empty_resync(self, label: str, reason: str) -> None:
        """With ``init_sync: skip`` a re-sync plans no INIT_SYNC, so the table would start again empty:
        stop instead, whatever ``on_position_lost`` says."""
        if self.settings.init_sync == "skip":
            raise PositionLostError(f"{label}: change position lost: {reason}; with init_sync = skip a re-sync "
                                    "would start the table again empty (its items lost): set init_sync to run "
                                    "to copy the table again")

    def _position_problem(self, client, cursor: TableCursor, stream_arn: str, now: int) -> str | None:
        """Why the stream cannot be resumed at ``cursor`` (see the module), or None."""
        if cursor.stream_arn != stream_arn:
            return (f"the table's stream is {stream_arn}, not {cursor.stream_arn} that the position belongs to "
                    "(its stream was disabled and enabled again, or the table was created again)")
        too_old = self.too_old(cursor, now)
        if too_old is not None:
            return too_old
        listed = {shard.shard_id for shard in list_shards(client, self.settings, stream_arn)}
        for shard_id, mark in sorted(cursor.shards.items()):
            if mark == END:
                continue
            if shard_id not in listed:
                return f"shard {shard_id} of the stored position no longer exists in the stream"
            try:
                shard_iterator(client, self.settings, stream_arn, shard_id, mark)
            except ShardLost as lost:
                return lost.reason
        return None

    def too_old(self, cursor: TableCursor, now: int) -> str | None:
        """Why ``cursor`` is outside the safe zone at time ``now`` (None: it is inside)."""
        age = (now - cursor.since_ms) / _HOUR_MS
        if age <= self.settings.safe_zone_hours:
            return None
        return (f"the stored position is {age:.1f} hours old, beyond safe_zone_hours = "
                f"{self.settings.safe_zone_hours:g} (DynamoDB Streams keep records for 24 hours)")

    # -- reading -----------------------------------------------------------------------------

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False,
             quiet: bool = False) -> Iterator[ChangeBatch]:
        """Records after the tables' positions, up to the time of the call, table after table (``quiet``:
        without the line saying so)."""
        upto = dt.datetime.now(dt.UTC)
        client = self.settings.client("dynamodbstreams")
        tables = {s.name: self.position_of(state.find(s.namespace, s.name)).tables[s.name] for s in streams}
        if not quiet:
            self.log(f"change capture: {len(streams)} DynamoDB stream(s) up to {upto.isoformat(timespec='seconds')}")
        for stream in streams:
            reader = _TableReader(self, client, self.widened.get(stream.key, stream), tables, upto)
            yield from reader.batches()


    def follow(self, streams: list[CatalogStream], state: State, follow: Follow,
               typed: bool = False) -> Iterator[ChangeBatch]:
        """A bounded read up to now each time ``follow.policy`` says a round is due (each lists the shards again,
        so new ones are read in lineage order as they appear) until ``follow.stop``; a table whose position
        is lost leaves the cycle. Each read ends with every table's checkpoint."""
        streams, quiet = list(streams), False
        while streams:
            for batch in self.read(streams, state, typed, quiet):
                streams = [s for s in streams if s.key not in batch.resync]
                yield batch
            quiet = True
            if follow.policy.wait(follow.stop):
                return


class _TableReader:
    """One table's shards as ChangeBatches, checkpointing every ``BATCH_CHANGES`` changes and at the end."""

    def __init__(self, capture: DynamoChangeCapture, client, stream: CatalogStream,
                 tables: dict[str, TableCursor], upto: dt.datetime) -> None:
        self.capture, self.client, self.stream, self.tables, self.upto = capture, client, stream, tables, upto
        self.cursor = tables[stream.name]
        self.shards = dict(self.cursor.shards)
        self.key_names = tuple(stream.primary_key_columns)
        self.runs: list[ChangeRun] = []
        self.pending = 0
        self.widened: list[CatalogStream] = []  # the stream, when widened since the last batch

    def batches(self) -> Iterator[ChangeBatch]:
        settings = self.capture.settings
        too_old = self.capture.too_old(self.cursor, _now_ms())
        if too_old is not None:  # an INIT_SYNC longer than the safe zone: records after it may be trimmed
            yield self._lost(too_old)
            return
        listed = lineage_order(list_shards(self.client, settings, self.cursor.stream_arn))
        try:
            for shard in listed:
                yield from self._read(shard.shard_id)
        except ShardLost as lost:
            yield self._lost(lost.reason)
            return
        live = {shard.shard_id for shard in listed}
        self.shards = {k: v for k, v in self.shards.items() if k in live}  # gone from the stream: read long ago
        yield self._checkpoint(since_ms=int(self.upto.timestamp() * 1000))

    def _read(self, shard_id: str) -> Iterator[ChangeBatch]:
        mark = self.shards.get(shard_id)
        if mark == END:
            return
        for records, ended in read_shard(self.client, self.capture.settings, self.cursor.stream_arn, shard_id,
                                         mark, self.upto):
            if records:
                self._add(records)
                self.shards[shard_id] = records[-1]["dynamodb"]["SequenceNumber"]
            if ended:
                self.shards[shard_id] = END
            if self.pending >= BATCH_CHANGES:
                yield self._checkpoint(self.cursor.since_ms)

    def _add(self, records: list[dict]) -> None:
        """The records created at or after the floor, as a run of changes."""
        floor = self.cursor.floor_ms
        kept = [r for r in records if int(r["dynamodb"]["ApproximateCreationDateTime"].timestamp() * 1000) >= floor]
        if kept:
            try:
                run = change_run(self.stream, self.key_names, kept, self.cursor.replay_until_ms)
            except SourceError as misfit:
                self._widen(misfit, [r["dynamodb"].get("NewImage") or r["dynamodb"]["Keys"] for r in kept])
                run = change_run(self.stream, self.key_names, kept, self.cursor.replay_until_ms)
            self.runs.append(run)
            self.pending += len(kept)

    def _widen(self, misfit: SourceError, images: list[dict]) -> None:
        """Widen the stream for numbers the images hold beyond its columns (in place; ``drift``), or
        raise the misfit again when they are not such numbers."""
        before = self.stream
        wider = widened_schema(before.json_schema, images)
        if wider is before.json_schema:
            raise misfit
        self.stream = self.capture.widened[before.key] = widened(before, wider)
        self.widened = [self.stream]
        changes = ", ".join(f"'{c}' {column_type(before, c)} -> {column_type(self.stream, c)}"
                            for c in changed_columns(before, self.stream))
        self.capture.log(f"{before.label}: numbers beyond their columns: {changes}, widened in place; later "
                         "changes carry the wider type(s)")

    def _checkpoint(self, since_ms: int) -> ChangeBatch:
        self.cursor = replace(self.cursor, shards=dict(self.shards), since_ms=since_ms)
        self.tables[self.stream.name] = self.cursor
        batch = ChangeBatch(runs=self.runs, position=DynamoPosition(self.capture.next_op(), dict(self.tables)),
                            widened=self.widened)
        self.runs, self.pending, self.widened = [], 0, []
        return batch

    def _lost(self, reason: str) -> ChangeBatch:
        """The changes read so far, and the table marked for a new INIT_SYNC (or PositionLostError)."""
        label = self.stream.label
        self.capture.refuse_empty_resync(label, reason)
        if self.capture.settings.on_position_lost == "fail":
            raise PositionLostError(f"{label}: change position lost: {reason} (on_position_lost = fail; set it "
                                    "to resync to re-copy the table)")
        return ChangeBatch(runs=self.runs, widened=self.widened,
                           resync={self.stream.key: f"change position lost: {reason}; the table runs INIT_SYNC "
                                                    "again on the next run"})


def change_run(stream: CatalogStream, key_names: tuple[str, ...], records: list[dict],
               replay_until_ms: int = 0) -> ChangeRun:
    """Stream records of one table as a run of changes: new images (keys for a REMOVE) as JSON texts;
    those made before ``replay_until_ms`` marked as replays of the INIT_SYNC's scan."""
    ops, images = [], []
    for record in records:
        change = record["dynamodb"]
        op = _OPS[record["eventName"]]
        image = change.get("Keys") if op == "d" else change.get("NewImage")
        if image is None:
            raise SourceError(f"dynamodb: {stream.label}: a {record['eventName']} record carries no new image "
                              f"(stream view {change.get('StreamViewType')}); the stream needs NEW_IMAGE or "
                              "NEW_AND_OLD_IMAGES")
        ops.append(op)
        images.append(image)
    batch = items_to_batch(images, stream.json_schema, stream.label, key_names)
    deletes = pa.array([op == "d" for op in ops])
    data = {}
    for name, prop in stream.json_schema.get("properties", {}).items():
        texts = json_texts(batch.column(name), olake_type_of(prop, name), name, prop)
        data[name] = texts if name in key_names or "d" not in ops else pc.if_else(deletes, None, texts)
    op_ids = [record_op(r["dynamodb"]["SequenceNumber"]) for r in records]
    created = pa.array([int(r["dynamodb"]["ApproximateCreationDateTime"].timestamp() * 1_000_000) for r in records],
                       pa.int64())
    replayed = pc.less(created, pa.scalar(replay_until_ms * 1000, pa.int64())) if replay_until_ms else None
    return ChangeRun(stream.key, data, pa.array(ops, pa.string()), pa.array([o.commit for o in op_ids], pa.uint64()),
                     pa.array([o.seq for o in op_ids], pa.uint64()), created, replayed=replayed)
