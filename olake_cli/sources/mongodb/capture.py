"""Change capture for MongoDB streams with a change stream on the database (resume tokens).

A position is a resume token plus the operation id it covers. Operation ids come from the cluster
time: ``(seconds << 32 | increment, n)``, where ``n`` counts the changes sharing that cluster time
(the operations of one transaction). Checkpoints fall only between cluster times, so a resumed run
never splits a transaction and its op ids stay those of the first reading.

A run is bounded: it reads up to the cluster time captured when it starts, then stops. The position
captured before a full load is taken the same way, so every change made during the load is replayed
after it; the destination keeps the version with the highest operation id, so replays converge.

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

import os
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterator

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import Change, ChangeRun, runs_of_changes
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.core.opid import OpId
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.position_lost import handle_lost_position
from olake_cli.core.schema_drift import column_type, changed_columns, needs_reload, record_in_state, widened
from olake_cli.core.state import State, StreamState
from olake_cli.sources.mongodb.change_decode import PendingChange, decoded_run
from datetime import UTC

HISTORY_LOST, INVALID_TOKEN = 286, 280
_OPS = {"insert": "c", "replace": "u", "update": "u", "delete": "d"}
_ENDS = ("drop", "rename", "dropDatabase", "invalidate")
CHECKPOINT_EVERY = max(1, int(os.environ.get("OLAKE_CDC_CHECKPOINT_EVERY", "20000")))
BATCH_CHANGES = 5000
GONE_WAIT_S = 10.0  # how long a run waits for the delete of a document an update found gone


@dataclass(frozen=True)
class MongoPosition:
    """A change-stream position: the resume token (its ``_data`` text) and the op id it covers."""

    token: str
    op: OpId


def cluster_op(ts: Any, seq: int = 0) -> OpId:
    """The operation id of a BSON Timestamp cluster time (and a 1-based sequence within it)."""
    return OpId((ts.time << 32) | ts.inc, seq)


class MongoChangeCapture:
    """Reads one database's change stream for the run's ``cdc`` streams (``core.contracts.ChangeCapture``)."""

    def __init__(self, settings, streams: list[CatalogStream], log: Callable[[str], None]) -> None:
        self.settings, self.streams, self.log = settings, streams, log
        self._start: MongoPosition | None = None
        self.widened: dict[tuple, CatalogStream] = {}  # streams widened in place by this run's changes

    # -- positions ---------------------------------------------------------------------------

    def position_of(self, ss: StreamState | None) -> MongoPosition | None:
        """The change position a stream state holds (``cursor_field`` token plus ``op_id``), or None."""
        if ss is None or ss.sync_type == "incremental" or not isinstance(ss.cursor_field, str) \
                or "op_id" not in ss.source:
            return None
        return MongoPosition(ss.cursor_field, OpId.from_json(ss.source["op_id"]))

    def with_position(self, ss: StreamState, position: MongoPosition) -> StreamState:
        """A copy of ``ss`` positioned at ``position``."""
        new = ss.copy() if ss.key not in self.widened else record_in_state(ss, self.widened[ss.key])
        new.cursor_field = position.token
        new.source["op_id"] = position.op.to_json()
        return new

    def position_op(self, position: MongoPosition) -> OpId:
        """The operation id the position covers."""
        return position.op

    def start_position(self) -> MongoPosition:
        """The position captured by :meth:`preflight`, before any full load."""
        assert self._start is not None, "preflight() runs first"
        return self._start

    def load_marks(self, session) -> dict[str, Any]:
        """Nothing beyond the start position: changes during the load are replayed after it."""
        return {}

    # -- preflight ---------------------------------------------------------------------------

    def preflight(self, state: State, pipeline: PipelineIdentity | None = None) -> None:
        """Require change streams, detect lost positions (re-sync or fail), capture the start position
        (a change stream is read by any number of pipelines: ``pipeline`` claims nothing)."""
        with self.settings.client() as client:
            hello = self._command(client, "hello")
            if not hello.get("setName") and hello.get("msg") != "isdbgrid":
                raise ConfigError(f"mongodb: {self.settings.describe()} is a standalone server, which has "
                                  f"no change streams; cdc needs a replica set (start mongod with "
                                  f"--replSet rs0 and run rs.initiate() once) or a sharded cluster")
            held = [(s, self.position_of(state.find(s.namespace, s.name))) for s in self.streams]
            for token in sorted({p.token for _, p in held if p is not None}):
                reason = self._token_problem(client, token)
                if reason is not None:
                    for stream, _ in [(s, p) for s, p in held if p is not None and p.token == token]:
                        self._lost(state, stream, reason)
            self._start = self._now(client)

    def _token_problem(self, client, token: str) -> str | None:
        """Why the log cannot be resumed at ``token`` (history pruned, token invalid), or None."""
        import pymongo.errors

        try:
            with self._watch(client, {"_data": token}) as stream:
                stream.try_next()
        except pymongo.errors.OperationFailure as exc:
            if exc.code == HISTORY_LOST:
                return ("the change stream no longer reaches back to the stream's position (the oplog "
                        "rolled over: ChangeStreamHistoryLost)")
            if exc.code == INVALID_TOKEN or exc.code == 9:
                return f"the stream's resume token is not valid here ({exc.details.get('codeName', exc.code)})"
            raise SourceError(self.settings.scrub(f"mongodb: change stream: {exc}")) from None
        return None

    def _lost(self, state: State, stream: CatalogStream, reason: str) -> None:
        handle_lost_position(state, stream.key, stream.label, reason, self.settings.on_position_lost, self.log)

    def _now(self, client) -> MongoPosition:
        """A position at the log's end now: the cluster time read first, then a fresh stream's token."""
        time = self._command(client, "hello")["operationTime"]
        with self._watch(client, None) as stream:
            stream.try_next()  # an empty batch sets the post-batch resume token
            return MongoPosition(stream.resume_token["_data"], cluster_op(time))

    # -- reading -----------------------------------------------------------------------------

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False) -> Iterator[ChangeBatch]:
        """Changes after the streams' positions, up to the cluster time at the call, in batches (a stretch
        decoded at once is a typed run when ``typed``)."""
        held = [self.position_of(state.find(s.namespace, s.name)) for s in streams]
        start = min((p for p in held if p is not None), key=lambda p: p.op)
        with self.settings.client() as client:
            upto = cluster_op(self._command(client, "hello")["operationTime"])
            self.log(f"change capture: database '{self.settings.database}' from {start.op} up to {upto}")
            with self._watch(client, {"_data": start.token}) as stream:
                yield from _EventReader(self, streams, upto, self._database(client), typed).batches(stream)

    def _database(self, client):
        """The configured database, reading majority-committed data; documents stay raw BSON (nested
        values decode as the converters expect when read)."""
        from bson.raw_bson import RawBSONDocument
        from pymongo.read_concern import ReadConcern

        from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

        return client.get_database(self.settings.database,
                                   codec_options=BSON_CODEC_OPTIONS.with_options(document_class=RawBSONDocument),
                                   read_concern=ReadConcern("majority"))

    def _watch(self, client, resume_after: dict | None):
        names = [s.name for s in self.streams]
        match = {"$match": {"ns.coll": {"$in": names}}}
        return self._database(client).watch([match], full_document="updateLookup", resume_after=resume_after,
                                             max_await_time_ms=200)

    def _command(self, client, name: str) -> dict:
        import pymongo.errors

        try:
            return client.admin.command(name)
        except pymongo.errors.PyMongoError as exc:
            raise SourceError(self.settings.scrub(f"mongodb: {name}: {exc}")) from None


class _EventReader:
    """Turns change events into ChangeBatches, checkpointing between cluster times."""

    def __init__(self, capture: MongoChangeCapture, streams: list[CatalogStream], upto: OpId, database,
                 typed: bool = False) -> None:
        self.capture, self.upto, self.database, self.typed = capture, upto, database, typed
        self.streams = {s.name: s for s in streams}
        self.namespace = {s.name: s.key for s in streams}
        self.gone: dict[tuple[str, bytes], str] = {}  # updates skipped until their delete is read
        self.pending: list[PendingChange] = []  # the current stretch of one stream's changes
        self.pending_name: str | None = None
        self.runs: list[ChangeRun] = []  # decoded stretches not yet handed out

    def batches(self, stream) -> Iterator[ChangeBatch]:
        """Events up to ``upto`` (further while a skipped update waits for its delete): a checkpoint
        after every complete cluster time once enough changed, none while an update waits."""
        import pymongo.errors

        batch, size, since, group, seq, last = ChangeBatch(), 0, 0, None, 0, None
        try:
            for event in self._events(stream):
                op = cluster_op(event["clusterTime"])
                if op.commit > self.upto.commit and not self.gone:
                    break
                if op.commit != group:
                    if last is not None and not self.gone and (since >= CHECKPOINT_EVERY or size >= BATCH_CHANGES):
                        batch.position, batch.runs, since, size = last, self._decoded(batch), 0, 0
                        yield batch
                        batch = ChangeBatch()
                    group, seq = op.commit, 0
                seq += 1
                if self._change(event, OpId(op.commit, seq), batch):
                    since += 1
                    size += 1
                last = MongoPosition(event["_id"]["_data"], OpId(op.commit, seq))
            else:  # the log is exhausted: the post-batch token is past everything up to ``upto``
                if stream.resume_token is not None:
                    covered = OpId(self.upto.commit, 0) if last is None else max(last.op, OpId(self.upto.commit, 0))
                    last = MongoPosition(stream.resume_token["_data"], covered)
        except pymongo.errors.PyMongoError as exc:
            raise SourceError(self.capture.settings.scrub(f"mongodb: change stream: {exc}")) from None
        batch.position, batch.runs = last, self._decoded(batch)
        yield batch

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

    def _events(self, stream) -> Iterator[dict]:
        """The stream's events until it has none now; while a skipped update waits for its delete,
        up to ``GONE_WAIT_S`` more (then a SourceError: the document vanished without a delete)."""
        deadline = None
        while True:
            event = stream.try_next()
            if event is not None:
                deadline = None
                yield event
            elif not self.gone:
                return
            elif deadline is None:
                deadline = time.monotonic() + GONE_WAIT_S
            elif time.monotonic() > deadline:
                label = next(iter(self.gone.values()))
                raise SourceError(f"mongodb: {label}: a document was updated, then vanished without a delete "
                                  f"in the change stream (waited {GONE_WAIT_S:.0f}s); nothing after the last "
                                  f"checkpoint is acknowledged; run again")

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
