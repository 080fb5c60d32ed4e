"""A MongoDB read session: the selected collections checked against the server, full loads planned
into ``_id`` chunks, and the readers of chunks and incremental passes.

MongoDB cannot share one snapshot between connections here, so every chunk reads the current data;
``cdc`` streams converge because change capture replays every change made after the position it
captured before the load (writes are idempotent). Readers wait for the operation time taken after
that position (``afterClusterTime``), so even a lagging secondary never serves older data.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from decimal import Decimal, localcontext
from typing import Any
from collections.abc import Callable

from bson import DatetimeMS, Decimal128
from bson.decimal128 import create_decimal128_context

from olake_cli.core.contracts import FullLoadPlan
from olake_cli.core.errors import CatalogError, OlakeError
from olake_cli.core.state import StreamState
from olake_cli.sources.mongodb import brackets
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS
from olake_cli.sources.mongodb.chunks import plan_chunks
from olake_cli.sources.mongodb.connection import MongoSettings, cluster_time, open_client, read_error
from olake_cli.sources.mongodb.discover import CURSOR_BRACKETS, list_collections, require_database
from olake_cli.sources.mongodb.scan import MongoChunkReader, collection_uuid, encode_query

_NUMBER_TYPES = CURSOR_BRACKETS["int64"]
_FINITE = {"$gt": float("-inf"), "$lt": float("inf")}
_INTERVAL_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(microsecond|millisecond|second|minute|hour|day|week|month|year)s?",
                            re.IGNORECASE)
_UNIT_MS = {"microsecond": 0.001, "millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000,
            "day": 86_400_000, "week": 604_800_000, "month": 30 * 86_400_000, "year": 365 * 86_400_000}


class MongoReadSession:
    """The run's view of the database (a context manager holding one client for planning)."""

    def __init__(self, settings: MongoSettings, streams: list[Any], log: Callable[[str], None]) -> None:
        self.settings, self.log = settings, log
        self.warnings: list[str] = []
        self._after_times: dict[tuple, tuple[int, int] | None] = {}
        self.client = open_client(settings)
        try:
            self._check_streams(streams)
        except BaseException:
            self.client.close()
            raise

    def __enter__(self) -> MongoReadSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def _check_streams(self, streams: list[Any]) -> None:
        """CatalogError for a stream of another database, a missing collection or a bad cursor."""
        db = self.client[self.settings.database]
        try:
            require_database(self.client, self.settings)  # as check and discover do: a misspelt one finds nothing
            live = set(list_collections(db, self.settings, restrict=False))
        except OlakeError:
            raise
        except Exception as exc:
            raise read_error(self.settings, exc,
                             f"listing the collections of '{self.settings.database}'") from None
        for stream in streams:
            if stream.namespace not in (None, self.settings.database):
                raise CatalogError(f"catalog: stream '{stream.label}' belongs to database '{stream.namespace}', "
                                   f"but the config reads database '{self.settings.database}' "
                                   "(run discover again)")
            if stream.name not in live:
                raise CatalogError(f"catalog: stream '{stream.label}': collection '{stream.name}' does not "
                                   f"exist in database '{self.settings.database}' (run discover again)")
            if stream.sync_mode == "incremental":
                _cursor_types(stream)

    def _collection(self, stream: Any):
        return self.client[self.settings.database].get_collection(stream.name, codec_options=BSON_CODEC_OPTIONS)

    def key_columns(self, stream: Any) -> tuple[str, ...]:
        """Every collection is keyed by ``_id``."""
        return ("_id",)

    def plan_full_load(self, stream: Any) -> FullLoadPlan:
        """``_id`` chunks covering every type bracket present (see ``chunks``), and the collection's
        UUID: every chunk checks it, so a collection dropped or renamed mid-load stops the load."""
        uuid = self._uuid(stream)
        try:
            plan = plan_chunks(self._collection(stream), self.settings.chunk_documents)
        except Exception as exc:
            raise read_error(self.settings, exc, f"planning the full load of {stream.label}") from None
        for warning in plan.warnings:
            self.log(f"{stream.label}: {warning}")
        self.log(f"{stream.label}: _id chunks by type: {plan.summary()}")
        return FullLoadPlan(list(plan.bounds), "_id", {"collection_uuid": uuid}, plan.estimate)

    def resume_blocker(self, stream: Any, previous: StreamState) -> str | None:
        """``_id`` ranges keep their meaning; only chunks this source did not write cannot resume."""
        if previous.chunk_column not in (None, "_id"):
            return "its chunks are not MongoDB _id ranges"
        recorded = previous.source.get("collection_uuid")
        if recorded is not None and recorded != self._uuid(stream):
            return ("the collection was dropped and created again (or replaced by a rename) since its full "
                    "load began, so its chunks no longer name the same documents")
        try:
            for chunk in previous.chunks or []:
                brackets.chunk_filter(chunk.min, chunk.max)
        except OlakeError as exc:
            return f"its chunks cannot be read back ({exc})"
        return None

    def chunk_reader(self, stream: Any, load: StreamState, index: int) -> MongoChunkReader:
        """The reader of chunk ``index``: documents whose ``_id`` lies in its bracket and range."""
        chunk = load.chunks[index]
        reader = self._reader(stream, brackets.chunk_filter(chunk.min, chunk.max), index)
        return replace(reader, collection_uuid=load.source.get("collection_uuid"))

    def max_cursor(self, stream: Any) -> str | None:
        """The largest finite cursor value of the cursor's bracket now, as Extended JSON (or None)."""
        name, types = stream.cursor_column, _cursor_types(stream)
        condition: dict[str, Any] = {"$type": list(types), **(_FINITE if types == _NUMBER_TYPES else {})}
        try:
            doc = self._collection(stream).find_one({name: condition}, projection={name: 1},
                                                    sort=[(name, -1)])
        except Exception as exc:
            raise read_error(self.settings, exc, f"reading the largest '{name}' of {stream.label}") from None
        return None if doc is None else brackets.value_text(doc[name])

    def incremental_reader(self, stream: Any, after: str | None, upto: str | None) -> MongoChunkReader:
        """Documents with ``after - lookback <= cursor <= upto`` (the boundary is read again on
        purpose), plus every document whose numeric cursor is NaN or infinite (they can hold no
        position, so each pass reads them). ``upto`` None reads only those."""
        name, types = stream.cursor_column, _cursor_types(stream)
        numeric = types == _NUMBER_TYPES
        clauses = []
        if upto is not None:
            condition: dict[str, Any] = {"$type": list(types), "$lte": brackets.parse_value_text(upto),
                                         **(_FINITE if numeric else {})}
            if after is not None:
                condition["$gte"] = _minus_lookback(brackets.parse_value_text(after), stream)
            clauses.append({name: condition})
        if numeric:
            clauses.append({name: {"$type": list(types), "$not": dict(_FINITE)}})
        query = clauses[0] if len(clauses) == 1 else {"$or": clauses} if clauses else {"_id": {"$in": []}}
        return self._reader(stream, query, 0)

    def _reader(self, stream: Any, query: dict, index: int) -> MongoChunkReader:
        return MongoChunkReader(settings=self.settings, collection=stream.name, query=encode_query(query),
                                json_schema=stream.json_schema, label=stream.label, chunk_index=index,
                                after_cluster_time=self._after_time(stream))

    def _uuid(self, stream: Any) -> str | None:
        """The collection's UUID now (None: missing, or a server that reports none)."""
        try:
            return collection_uuid(self.client[self.settings.database], stream.name)
        except Exception as exc:
            raise read_error(self.settings, exc, f"reading the UUID of {stream.label}") from None

    def _after_time(self, stream: Any) -> tuple[int, int] | None:
        """The operation time readers of ``stream`` wait for: taken once, after the stream's position
        (the pipeline asks for readers only once it has captured the position or the cursor's max)."""
        if stream.key not in self._after_times:
            try:
                self._after_times[stream.key] = cluster_time(self.client)
            except Exception as exc:
                raise read_error(self.settings, exc, "reading the cluster time") from None
        return self._after_times[stream.key]


def _cursor_types(stream: Any) -> tuple[str, ...]:
    """The $type aliases of the incremental cursor's bracket; CatalogError if it cannot be a cursor."""
    name = stream.cursor_column
    where = f"catalog: stream '{stream.label}'"
    if not name:
        raise CatalogError(f"{where}: sync_mode 'incremental' needs a cursor_field")
    prop = stream.json_schema.get("properties", {}).get(name)
    olake_type = prop.get("x-olake-type") if isinstance(prop, dict) else None
    if olake_type not in CURSOR_BRACKETS:
        raise CatalogError(f"{where}: cursor_field '{name}' has type {olake_type}, whose values MongoDB "
                           f"cannot order; choose one of {', '.join(sorted(CURSOR_BRACKETS))}")
    lookback = stream.cursor_lookback
    if lookback is not None:
        numeric = CURSOR_BRACKETS[olake_type] == _NUMBER_TYPES
        valid = (isinstance(lookback, (int, float)) and not isinstance(lookback, bool) and lookback >= 0
                 if numeric else olake_type == "datetime_ms" and isinstance(lookback, str)
                 and _INTERVAL_PART.search(lookback) is not None)
        if not valid:
            raise CatalogError(f"{where}: cursor_lookback {lookback!r} does not suit the {olake_type} cursor "
                               f"'{name}' (a number for numbers, an interval such as '10 minutes' for dates, "
                               "none for ObjectIds)")
    return CURSOR_BRACKETS[olake_type]


def _minus_lookback(value: Any, stream: Any) -> Any:
    """``value`` moved back by the stream's cursor_lookback (exact for every number type)."""
    lookback = stream.cursor_lookback
    if lookback is None or lookback == 0:
        return value
    if isinstance(value, DatetimeMS):
        millis = sum(float(n) * _UNIT_MS[unit.lower()] for n, unit in _INTERVAL_PART.findall(lookback))
        return DatetimeMS(int(value) - math.ceil(millis))
    exact = value.to_decimal() if isinstance(value, Decimal128) else Decimal(value)
    with localcontext(create_decimal128_context()) as context:
        return Decimal128(context.subtract(exact, Decimal(str(lookback))))
