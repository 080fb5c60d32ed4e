"""Change events of one change stream turned into ChangeBatches (``capture.MongoChangeCapture``).

Checkpoints fall between cluster times only (the operations of one transaction share one), and never
while an update whose document was gone waits for its delete. A bounded run reads up to a cluster time
and checkpoints every CHECKPOINT_EVERY changes (BATCH_CHANGES at most per batch). A following run
(``--follow``, ``core.follow``) keeps the stream open: each empty ``try_next`` is an idle moment (the
server awaited new events for ``max_await_time_ms``); at a cluster time's end or an idle moment it
checkpoints when the run's ``CommitPolicy`` says one is due, and at an idle moment it may move an idle
stream's position to the post-batch resume token (so the position stays inside the oplog while the
followed collections are quiet and the database is not). On its stop request it checkpoints at the
next cluster time's end or idle moment and returns.

Updates carry the post-image (``fullDocument: updateLookup``). When it is missing (the document was
deleted before the lookup, or a server could not look it up), the document is looked up again by its
key (majority read): found, the update carries that version. Gone, the update is skipped only because
its delete follows: the run reads on, past its bound if need be, until it has read that delete, and
sets no checkpoint in between; a delete that never comes fails the run.

Events arrive as raw BSON; each stretch of one stream's changes is decoded at once into a run of
JSON-text columns (``change_decode``), as PostgreSQL's capture produces them. A stretch the columnar
decoder declines is converted document by document: a change whose document does not fit the stream's
types widens the stream (``drift``): in place (a new column, int32 to int64) it is announced with the
batch and recorded in the stream's later positions; a column whose type is replaced ends the stream's
capture, and the stream is loaded anew on the next run (whose full load widens it again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import Change, ChangeRun, runs_of_changes
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import SourceError
from olake_cli.core.follow import CHECKPOINT_EVERY, Follow
from olake_cli.core.opid import OpId
from olake_cli.core.schema_drift import column_type, changed_columns, needs_reload, widened
from olake_cli.sources.mongodb.change_decode import PendingChange, decoded_run
from olake_cli.sources.mongodb.change_positions import MongoPosition, cluster_op, idle_position

_OPS = {"insert": "c", "replace": "u", "update": "u", "delete": "d"}
_ENDS = ("drop", "rename", "dropDatabase", "invalidate")
BATCH_CHANGES = 5000
GONE_WAIT_S = 10.0  # how long a run waits for the delete of a document an update found gone


class ChangeEventReader:
    """Turns change events into ChangeBatches, checkpointing between cluster times."""

    def __init__(self, capture, streams: list[CatalogStream], database, typed: bool = False) -> None:
        self.capture, self.database, self.typed = capture, database, typed
        self.streams = {s.name: s for s in streams}
        self.gone: dict[tuple[str, bytes], str] = {}  # updates skipped until their delete is read
        self.pending: list[PendingChange] = []  # the current stretch of one stream's changes
        self.pending_name: str | None = None
        self.runs: list[ChangeRun] = []  # decoded stretches not yet handed out
        self.batch, self.since, self.size = ChangeBatch(), 0, 0  # changes read, since the last checkpoint
        self.group, self.seq, self.last = None, 0, None  # the current cluster time, its count, the last change
        self.start: OpId | None = None  # the op id of the position a following stream resumed at

    def batches(self, stream, upto: OpId, start: OpId | None = None) -> Iterator[ChangeBatch]:
        """Events up to ``upto`` (further while a skipped update waits for its delete): a checkpoint
        after every complete cluster time once enough changed, none while an update waits; ``start`` is
        the op id of the position the stream resumed at."""
        for event in self._events(stream):
            op = cluster_op(event["clusterTime"])
            if op.commit > upto.commit and not self.gone:
                break
            if self._between(op) and (self.since >= CHECKPOINT_EVERY or self.size >= BATCH_CHANGES):
                yield self._handed(self.last)
            self._read(event, op)
        else:  # an empty batch: its post-batch token is as far as the stream has read (up to ``upto``)
            if stream.resume_token is not None:
                self.last = idle_position(stream.resume_token["_data"], upto, self.last, start)
        yield self._handed(self.last)

    def follow(self, stream, follow: Follow, cluster_time: Callable[[], OpId], start: OpId) -> Iterator[ChangeBatch]:
        """Events as they come, until ``follow.stop`` (see the module's docstring); ``cluster_time`` reads
        the deployment's cluster time, ``start`` is the op id of the position the stream resumed at."""
        policy, held, read_before, deadline = follow.policy, start, None, None
        self.start = start
        while stream.alive and self.streams:
            event = stream.try_next()
            if event is not None:
                read_before, deadline = None, None
                op = cluster_op(event["clusterTime"])
                if self._between(op) and (follow.stop.is_set() or policy.at_end(self.since)):
                    yield self._handed(self.last)
                    held = self.last.op
                    policy.checkpointed()
                    if follow.stop.is_set():
                        return
                elif self.size >= BATCH_CHANGES:
                    yield self._handed(None)
                self._read(event, op)
                continue
            deadline = self._still_waiting(deadline)
            position = self._idle_position(stream, read_before)
            due = policy.idle(self.since, moved=position is not None and position.op > held)
            if position is not None and not self.gone and (due or follow.stop.is_set()):
                yield self._handed(position)
                held = position.op
                policy.checkpointed()
            if follow.stop.is_set():
                return
            read_before = cluster_time()  # before the next empty batch, whose token is then past it
        if self.last is not None and not self.gone:
            yield self._handed(self.last)

    def _between(self, op: OpId) -> bool:
        """Whether ``op`` starts a new cluster time after a change read, with no update waiting."""
        return op.commit != self.group and self.last is not None and not self.gone

    def _read(self, event, op: OpId) -> None:
        """Queue one event's change with its op id, and note its position."""
        if op.commit != self.group:
            self.group, self.seq = op.commit, 0
        self.seq += 1
        if self._change(event, OpId(op.commit, self.seq), self.batch):
            self.since, self.size = self.since + 1, self.size + 1
        self.last = MongoPosition(event["_id"]["_data"], OpId(op.commit, self.seq))

    def _handed(self, position: MongoPosition | None) -> ChangeBatch:
        """The changes read so far as a batch, checkpointed at ``position`` (None: no checkpoint)."""
        batch, self.batch = self.batch, ChangeBatch()
        batch.position, batch.runs = position, self._decoded(batch)
        self.size = 0
        if position is not None:
            self.since = 0
        return batch

    def _idle_position(self, stream, read_before: OpId | None) -> MongoPosition | None:
        """At an idle moment, the post-batch resume token with the op id it covers: the cluster time read
        before the batch (``read_before``), or the last change read (None: nothing to checkpoint)."""
        token = stream.resume_token
        if token is None or (read_before is None and self.last is None):
            return self.last
        if read_before is None:
            return MongoPosition(token["_data"], self.last.op)
        return idle_position(token["_data"], read_before, self.last, self.start)

    def _events(self, stream) -> Iterator[dict]:
        """The stream's events until it has none now; while a skipped update waits for its delete, up
        to ``GONE_WAIT_S`` more."""
        deadline = None
        while True:
            event = stream.try_next()
            if event is not None:
                deadline = None
                yield event
            elif not self.gone:
                return
            else:
                deadline = self._still_waiting(deadline)

    def _still_waiting(self, deadline: float | None) -> float | None:
        """The deadline for the delete a skipped update waits for (None: none waits); a SourceError once
        it passed (the document vanished without a delete)."""
        if not self.gone:
            return None
        if deadline is None:
            return time.monotonic() + GONE_WAIT_S
        if time.monotonic() > deadline:
            label = next(iter(self.gone.values()))
            raise SourceError(f"mongodb: {label}: a document was updated, then vanished without a delete "
                              f"in the change stream (waited {GONE_WAIT_S:.0f}s); nothing after the last "
                              f"checkpoint is acknowledged; run again")
        return deadline

    def _decoded(self, batch: ChangeBatch) -> list[ChangeRun]:
        """The runs of every change queued so far (the current stretch decoded now)."""
        self._end_stretch(batch)
        runs, self.runs = self.runs, []
        return runs

    def _end_stretch(self, batch: ChangeBatch) -> None:
        """Decode the queued stretch of one stream's changes: at once, or (declined) one by one."""
        name, pending = self.pending_name, self.pending
        self.pending, self.pending_name = [], None
        stream = self.streams.get(name)
        if not pending or stream is None:
            return
        run = decoded_run(stream, pending, self.typed)
        if run is not None:
            self.runs.append(run)
            return
        changes = (self._converted(name, change, batch) for change in pending)
        self.runs += runs_of_changes([change for change in changes if change is not None])

    def _converted(self, name: str, pending: PendingChange, batch: ChangeBatch) -> Change | None:
        """One queued change converted on its own (None when its stream was loaded anew meanwhile)."""
        import bson

        from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

        stream = self.streams.get(name)
        if stream is None:
            return None
        document = bson.decode(pending.document, codec_options=BSON_CODEC_OPTIONS)
        data = self._wire(stream, document, pending.op == "d", batch)
        if data is None:
            return None
        data.update(_olake_op=pending.op, _olake_op_id=[pending.op_id.commit, pending.op_id.seq],
                    _olake_commit_ts=pending.commit_ts)
        return Change(stream.key, pending.op_id, data)

    def _change(self, event, op_id: OpId, batch: ChangeBatch) -> bool:
        """Queue the event's change (True), or act on an event that carries none (False)."""
        kind = event["operationType"]
        name = (event.get("ns") or {}).get("coll")
        stream = self.streams.get(name)
        if stream is None:
            return False
        if name != self.pending_name or kind in _ENDS:
            self._end_stretch(batch)
            self.pending_name = name
        if name not in self.streams:  # loaded anew after the stretch just decoded
            return False
        if kind in _ENDS:
            if stream.key not in batch.resync:
                batch.resync[stream.key] = (f"the collection saw '{kind}'; its stream ends here and is "
                                            f"loaded anew on the next run (run discover again if it is gone)")
            del self.streams[name]
            self.gone = {k: v for k, v in self.gone.items() if k[0] != name}
            return False
        if kind not in _OPS:
            return False
        if kind == "delete":
            self.gone.pop((name, _key_bytes(event)), None)
            document = _key_document(event)
        else:
            document = event.get("fullDocument")
            if document is None:
                document = self._look_up(name, event["documentKey"])
            if document is None:  # deleted since: skipped, and the run reads on until that delete
                self.gone[(name, _key_bytes(event))] = stream.label
                return False
        wall = event.get("wallTime")
        commit_ts = _micros(wall) if wall is not None else event["clusterTime"].time * 1_000_000
        self.pending.append(PendingChange(_OPS[kind], document.raw, op_id, commit_ts))
        return True

    def _wire(self, stream: CatalogStream, document: dict, key_only: bool, batch: ChangeBatch) -> dict | None:
        """The change's RECORD data; a document that does not fit widens the stream first (in place:
        announced with ``batch``), or ends its capture for a reload (None)."""
        from olake_cli.sources.mongodb.bson_wire import document_to_wire
        from olake_cli.sources.mongodb.drift import widened_schema

        schema = _key_schema(stream) if key_only else stream.json_schema
        try:
            return document_to_wire(document, schema, stream.label)
        except SourceError:
            wider = widened_schema(stream.json_schema, [document])
            if wider is stream.json_schema:
                raise
        after = widened(stream, wider)
        changes = ", ".join(f"'{c}' {column_type(stream, c)} -> {column_type(after, c)}"
                            for c in changed_columns(stream, after))
        if needs_reload(stream, after):
            batch.resync[stream.key] = (f"schema drift: {changes} (a column's type is replaced); the stream "
                                        f"is loaded anew on the next run with the new type(s)")
            del self.streams[stream.name]
            return None
        self.capture.log(f"{stream.label}: schema drift: {changes}; later changes carry the new column type(s)")
        self.streams[stream.name] = self.capture.widened[stream.key] = after
        batch.widened = [s for s in batch.widened if s.key != after.key] + [after]
        return document_to_wire(document, _key_schema(after) if key_only else after.json_schema, after.label)

    def _look_up(self, collection: str, key):
        """The document of ``key`` (a documentKey) now, as raw BSON, or None when it no longer exists."""
        return self.database[collection].find_one({name: {"$eq": value} for name, value in key.items()})


def _key_bytes(event: dict) -> bytes:
    """A change event's documentKey as BSON: equal for the update and the delete of one document."""
    import bson

    from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

    return bson.encode(event["documentKey"], codec_options=BSON_CODEC_OPTIONS)


def _key_document(event):
    """The document a delete carries: its ``_id`` alone, as raw BSON."""
    import bson
    from bson.raw_bson import RawBSONDocument

    from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

    return RawBSONDocument(bson.encode({"_id": event["documentKey"]["_id"]}, codec_options=BSON_CODEC_OPTIONS))


def _key_schema(stream: CatalogStream) -> dict:
    """The part of a stream's schema a delete carries: its ``_id``."""
    return {"type": "object", "properties": {"_id": stream.json_schema["properties"]["_id"]}}


def _micros(value: Any) -> int:
    """Microseconds since the epoch of a wallTime (datetime or DatetimeMS)."""
    if hasattr(value, "_value"):  # bson.datetime_ms.DatetimeMS
        return int(value._value) * 1000

    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1_000_000)
