"""Change capture for MongoDB streams with a change stream on the database (resume tokens).

A position is a resume token plus the operation id it covers (``change_positions``). Checkpoints fall
only between cluster times, so a resumed run never splits a transaction and its op ids stay those of
the first reading (``change_events`` turns the events into batches).

A bounded run reads up to the cluster time captured when it starts, then stops; a following run
(``--follow``) keeps the stream open until its stop request. The position captured before a full load
is taken the same way, so every change made during the load is replayed after it; the destination
keeps the version with the highest operation id, so replays converge. Driver errors that may go away
(a lost connection, a server restarting or stepping down) are TransientErrors: a following run opens
the stream again from the state it has handed on, whose checkpoints all lie between cluster times.
Resume tokens are confirmed to nobody: the server keeps its oplog by size, not for a reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import ChangeBatch
from olake_cli.core.errors import ConfigError, SourceError
from olake_cli.core.follow import Follow
from olake_cli.core.opid import OpId
from olake_cli.core.pipeline_identity import PipelineIdentity
from olake_cli.core.position_lost import handle_lost_position
from olake_cli.core.schema_drift import record_in_state
from olake_cli.core.state import State, StreamState
from olake_cli.sources.mongodb.change_events import ChangeEventReader
from olake_cli.sources.mongodb.change_positions import MongoPosition, cluster_op, idle_position
from olake_cli.sources.mongodb.connection import read_error

HISTORY_LOST, INVALID_TOKEN = 286, 280


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
        read_before = self._cluster_time(client)
        with self._watch(client, None) as stream:
            stream.try_next()  # an empty batch sets the post-batch resume token
            return idle_position(stream.resume_token["_data"], read_before, None)

    # -- reading -----------------------------------------------------------------------------

    def read(self, streams: list[CatalogStream], state: State, typed: bool = False) -> Iterator[ChangeBatch]:
        """Changes after the streams' positions, up to the cluster time at the call, in batches (a stretch
        decoded at once is a typed run when ``typed``)."""
        start = self._start_of(streams, state)
        with self._driver_errors(), self.settings.client() as client:
            upto = self._cluster_time(client)
            self.log(f"change capture: database '{self.settings.database}' from {start.op} up to {upto}")
            with self._watch(client, {"_data": start.token}) as stream:
                reader = ChangeEventReader(self, streams, self._database(client), typed)
                yield from reader.batches(stream, upto, start.op)

    def follow(self, streams: list[CatalogStream], state: State, follow: Follow,
               typed: bool = False) -> Iterator[ChangeBatch]:
        """Changes after the streams' positions as they come, checkpointing on ``follow``'s cadence, until
        its stop request (see ``change_events``); a TransientError when the stream is lost."""
        start = self._start_of(streams, state)
        with self._driver_errors(), self.settings.client() as client:
            self.log(f"change capture: following database '{self.settings.database}' from {start.op}")
            with self._watch(client, {"_data": start.token}) as stream:
                reader = ChangeEventReader(self, streams, self._database(client), typed)
                yield from reader.follow(stream, follow, lambda: self._cluster_time(client), start.op)
        if not follow.stop.is_set():
            self.log("change capture: no stream is left to follow (each is loaded anew on the next run); "
                     "the run ends")

    def _start_of(self, streams: list[CatalogStream], state: State) -> MongoPosition:
        """The lowest position the streams hold in ``state``."""
        held = [self.position_of(state.find(s.namespace, s.name)) for s in streams]
        return min((p for p in held if p is not None), key=lambda p: p.op)

    @contextmanager
    def _driver_errors(self) -> Iterator[None]:
        """Driver errors as OlakeErrors: TransientError when they may go away (``connection.read_error``)."""
        import pymongo.errors

        try:
            yield
        except pymongo.errors.PyMongoError as exc:
            raise read_error(self.settings, exc, "change stream") from None

    def _cluster_time(self, client) -> OpId:
        """The deployment's cluster time now (``hello``'s operationTime)."""
        return cluster_op(self._command(client, "hello")["operationTime"])

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
            raise read_error(self.settings, exc, name) from None
