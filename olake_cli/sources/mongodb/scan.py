"""The chunk reader of a MongoDB stream: runs inside a Spark task and yields Arrow record batches.

Each cursor batch arrives as raw BSON and becomes one record batch column by column
(``bson_arrow.raw_batch``); a batch that leaves the regular layout is decoded document by document
and converted by ``bson_types.documents_to_batch``, which names any value that does not fit.

A document holding a value its field's type cannot take (schema drift) stops the chunk with a
``SchemaDrift`` carrying the stream's schema widened to hold the whole chunk (``drift``): the rest of
the chunk is read for its types only, so one chunk asks for one widening.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterator

import bson

from olake_cli.core.errors import OlakeError, SchemaDrift, SourceChangedError, SourceError
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS
from olake_cli.sources.mongodb.connection import MongoSettings, read_error


def collection_uuid(db, name: str) -> str | None:
    """The collection's UUID (``listCollections`` ``info.uuid``): a drop, a rename or a re-creation
    changes it. None when the collection does not exist or the server reports no UUID."""
    import uuid

    found = next(iter(db.list_collections(filter={"name": name})), None)
    value = ((found or {}).get("info") or {}).get("uuid")
    if value is None:
        return None
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))


def encode_query(query: dict) -> bytes:
    """A query as BSON bytes: exact (every number keeps its BSON type) and picklable."""
    return bson.encode(query, codec_options=BSON_CODEC_OPTIONS)


@dataclass(frozen=True)
class MongoChunkReader:
    """The documents of one collection matching ``query`` (a chunk or an incremental range).

    ``after_cluster_time`` (seconds, increment) makes the read wait until the member it reads from
    has applied that operation time, so a lagging secondary never returns data older than the
    position the run captured before planning.
    """

    settings: MongoSettings
    collection: str
    query: bytes  # BSON of the filter document
    json_schema: dict = field(hash=False)
    label: str = ""
    chunk_index: int = 0
    after_cluster_time: tuple[int, int] | None = None
    collection_uuid: str | None = None  # the collection the load was planned on (None: not checked)

    def filter(self) -> dict[str, Any]:
        """The query as a document."""
        return bson.decode(self.query, codec_options=BSON_CODEC_OPTIONS)

    def read_batches(self) -> Iterator[Any]:
        """Record batches of ``batch_documents`` documents, typed by the stream's json_schema."""
        try:
            yield from self._batches()
        except OlakeError:
            raise
        except Exception as exc:  # driver errors arrive as many types; report them as one, scrubbed
            raise read_error(self.settings, exc, f"chunk {self.chunk_index} of {self.label}") from None

    def raw_batches(self) -> Iterator[bytes]:
        """The matching documents as cursor batches of raw BSON (concatenated documents)."""
        from bson.timestamp import Timestamp

        with self.settings.client() as client:
            coll = client[self.settings.database].get_collection(self.collection,
                                                                 codec_options=BSON_CODEC_OPTIONS)
            with client.start_session(causal_consistency=True) as session:
                if self.after_cluster_time is not None:
                    session.advance_operation_time(Timestamp(*self.after_cluster_time))
                for raw in coll.find_raw_batches(self.filter(), session=session,
                                                 batch_size=max(1, self.settings.batch_documents)):
                    if raw:
                        yield raw
            self._check_same_collection(client[self.settings.database])

    def documents(self) -> Iterator[dict]:
        """The matching documents, decoded for the converter (dates as DatetimeMS, Int64 kept)."""
        for raw in self.raw_batches():
            yield from bson.decode_all(raw, codec_options=BSON_CODEC_OPTIONS)

    def _check_same_collection(self, db) -> None:
        """SourceChangedError unless the collection read is still the one the load was planned on:
        a dropped or renamed collection reads as empty, which must never pass as a finished chunk."""
        if self.collection_uuid is None:
            return
        now = collection_uuid(db, self.collection)
        if now != self.collection_uuid:
            what = "dropped or renamed" if now is None else "dropped and created again (or replaced by a rename)"
            raise SourceChangedError(
                f"mongodb: collection {self.label} was {what} during its full load (chunk {self.chunk_index}); "
                "the load stopped; committed chunks are kept; run again: a collection of that name loads "
                "anew, a missing one is reported")

    def _batches(self) -> Iterator[Any]:
        from olake_cli.sources.mongodb.bson_arrow import raw_batch

        raws = self.raw_batches()
        for raw in raws:
            batch = raw_batch(raw, self.json_schema)
            if batch is None:
                rest = (d for more in raws for d in bson.decode_all(more, codec_options=BSON_CODEC_OPTIONS))
                batch = self._batch(bson.decode_all(raw, codec_options=BSON_CODEC_OPTIONS), rest)
            yield batch

    def _batch(self, documents: list[dict], rest: Iterator[dict]) -> Any:
        """The documents as a record batch; a SchemaDrift (widened for them and ``rest``, the chunk's
        documents still unread) when they do not fit the stream's types but a wider schema holds them."""
        from olake_cli.sources.mongodb.bson_types import documents_to_batch
        from olake_cli.sources.mongodb.drift import widened_schema

        try:
            return documents_to_batch(documents, self.json_schema, self.label)
        except SourceError as exc:
            widened = widened_schema(self.json_schema, itertools.chain(documents, rest))
            if widened is self.json_schema:
                raise
            raise SchemaDrift(f"chunk {self.chunk_index}: {exc}", widened) from None
