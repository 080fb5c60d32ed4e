"""Full-load chunk planning on ``_id``: every type bracket present, each cut into ranges, reading the
collection at most once (on servers such as SecantusDB every query but an ``_id`` lookup reads it all).

1. How many documents: ``estimatedDocumentCount`` (collection metadata on MongoDB). A collection that
   fits in one chunk gets one chunk spanning every bracket (``brackets.SPANNING``) and no other query.
2. Which brackets ``_id`` has and where to cut them, first that works:
   * ``splitVector`` over the whole ``_id`` index (mongod with the privilege; mongos and SecantusDB
     have none), with the brackets found by ``find_one({_id: {$type: ...}})`` index seeks;
   * one aggregation pass (``census``): a ``$facet`` counting the ``_id``\\s of each BSON type beside a
     ``$bucketAuto`` over all ``_id``\\s (exact sizes, up to ``EXACT_SPLIT_LIMIT`` documents: it sorts
     them) or a ``$sample`` of them sorted by the server; a bucket's lower bound is a cut in its
     bracket. Brackets of at most ``chunk_documents`` documents are one chunk.
3. The cuts are checked: each must be ``$gte`` the previous one by the server's own query comparison
   (``verify_nested``, over the cut values alone with ``$documents``, not the collection), so the
   chunks' queries (see ``brackets``) partition the bracket exactly even on a server whose sort order
   and range queries disagree; cuts that fail are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

from bson.decimal128 import Decimal128
from bson.son import SON

from olake_cli.sources.mongodb.brackets import (
    BRACKETS, BY_NAME, SPANNING, Bracket, bracket_chunks, bracket_of, encode_value,
)

EXACT_SPLIT_LIMIT = 1_000_000  # $bucketAuto sorts every _id; above this, sample
MAX_SAMPLE = 50_000
_VERIFY_BATCH = 500
_TYPE_BRACKET = {alias: b for b in BRACKETS for alias in b.types}


@dataclass
class ChunkPlan:
    """Chunk bounds in state form, how each bracket was split, and what the planner noticed."""

    bounds: list[tuple[list, list]]
    methods: dict[str, str] = field(default_factory=dict)  # bracket -> whole|splitVector|bucketAuto|sample
    warnings: list[str] = field(default_factory=list)
    estimate: int | None = None  # the collection's document count from its metadata

    def summary(self) -> str:
        """``objectId: 12 (splitVector), number: 1 (whole)`` for logs."""
        counts: dict[str, int] = {}
        for lo, hi in self.bounds:
            name = lo[0] if lo[0] == hi[0] else f"{lo[0]}..{hi[0]}"
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{name}: {n} ({self.methods.get(name, 'whole')})" for name, n in counts.items())


def plan_chunks(coll, chunk_documents: int) -> ChunkPlan:
    """Chunks of about ``chunk_documents`` documents covering every ``_id`` of ``coll`` exactly once.

    ``coll`` must decode with ``BSON_CODEC_OPTIONS``. A collection whose metadata counts at most
    ``chunk_documents`` documents (an empty one too) gets one chunk spanning every bracket.
    """
    estimate = _try(coll.estimated_document_count)
    if estimate is not None and estimate <= chunk_documents:
        return ChunkPlan([SPANNING], estimate=estimate)
    split_keys = split_vector_keys(coll, chunk_documents)
    if split_keys is not None:
        present, method = present_brackets(coll), "splitVector"
        cuts = {name: keys for name, keys in split_keys.items() if BY_NAME[name].splittable}
    else:
        present, cuts, method = census(coll, chunk_documents, estimate)
    if not present:
        return ChunkPlan([SPANNING], estimate=estimate)
    plan = ChunkPlan([], estimate=estimate)
    for bracket in present:
        wanted = [c for c in cuts.get(bracket.name, []) if not _is_nan(c)]  # $gte NaN matches only NaN
        checked = verify_nested(coll, wanted)
        if len(checked) < len(wanted):
            plan.warnings.append(
                f"{len(wanted) - len(checked)} of {len(wanted)} cut(s) between {bracket.name} _id values failed the "
                "server's range check (its range queries disagree with its sort order) and were dropped: "
                "those chunks are larger, no document is lost")
        plan.methods[bracket.name] = method if checked else "whole"
        plan.bounds.extend(bracket_chunks(bracket, checked))
    return plan


def present_brackets(coll) -> list[Bracket]:
    """The brackets at least one ``_id`` belongs to, in MongoDB's type order (``_id`` index seeks)."""
    remaining = list(BRACKETS)
    found: list[Bracket] = []
    while remaining:
        types = [t for b in remaining for t in b.types]
        doc = coll.find_one({"_id": {"$type": types}}, projection={"_id": 1}, sort=[("_id", 1)])
        if doc is None:
            break
        bracket = bracket_of(doc["_id"])
        if bracket not in remaining:  # the server matched a type it was not asked for: stop asking
            raise RuntimeError(f"$type query for {types} returned an _id of bracket {bracket.name}")
        remaining.remove(bracket)
        found.append(bracket)
    return sorted(found, key=BRACKETS.index)


def census(coll, chunk_documents: int, estimate: int | None) -> tuple[list[Bracket], dict[str, list], str]:
    """(brackets present, ascending cuts per bracket, method) from one aggregation pass."""
    pieces = max(1, math.ceil((estimate or 0) / max(1, chunk_documents)))
    by_type = [{"$group": {"_id": {"$type": "$_id"}, "n": {"$sum": 1}}}]
    exact = estimate is not None and estimate <= EXACT_SPLIT_LIMIT
    if exact:
        cutting, method = [{"$bucketAuto": {"groupBy": "$_id", "buckets": pieces}}], "bucketAuto"
    else:
        size = min(MAX_SAMPLE, max(64 * pieces, 1000))
        cutting, method = [{"$sample": {"size": size}}, {"$project": {"_id": 1}}, {"$sort": {"_id": 1}}], "sample"
    reply = _try(lambda: list(coll.aggregate([{"$facet": {"types": by_type, "cut": cutting}}], allowDiskUse=True)))
    if reply is None:  # no $facet (or no $bucketAuto): count the types alone, cut nothing
        reply, method = [{"types": list(coll.aggregate(by_type, allowDiskUse=True)), "cut": []}], "whole"
    counts: dict[str, int] = {}
    for row in reply[0]["types"]:
        bracket = _TYPE_BRACKET.get(row["_id"])
        if bracket is None:
            raise RuntimeError(f"_id of BSON type {row['_id']!r} cannot be chunked")
        counts[bracket.name] = counts.get(bracket.name, 0) + int(row["n"])
    if exact:
        values = [bucket["_id"]["min"] for bucket in reply[0]["cut"][1:]]
    else:
        values = _quantiles([doc["_id"] for doc in reply[0]["cut"]], counts, chunk_documents)
    cuts: dict[str, list] = {}
    for value in values:
        bracket = bracket_of(value)
        if bracket.splittable and counts.get(bracket.name, 0) > chunk_documents:
            cuts.setdefault(bracket.name, []).append(value)
    return [b for b in BRACKETS if b.name in counts], cuts, method


def _quantiles(ids: list, counts: dict[str, int], chunk_documents: int) -> list:
    """Cuts at the quantiles of each bracket's sampled ``_id``\\s (sorted by the server)."""
    grouped: dict[str, list] = {}
    for value in ids:
        grouped.setdefault(bracket_of(value).name, []).append(value)
    cuts: list = []
    for name, sample in grouped.items():
        pieces = math.ceil(counts.get(name, 0) / max(1, chunk_documents))
        step = len(sample) / max(1, pieces)
        for i in range(1, pieces if len(sample) >= 2 else 0):
            value = sample[min(len(sample) - 1, int(i * step))]
            if not cuts or encode_value(cuts[-1]) != encode_value(value):
                cuts.append(value)
    return cuts


def split_vector_keys(coll, chunk_documents: int) -> dict[str, list] | None:
    """``splitVector`` cuts over the whole ``_id`` index, grouped by bracket; None when the server
    has no such command (mongos, SecantusDB, Atlas tiers) or the user lacks the privilege (asked
    first with a no-op split, so such servers are not asked for collection statistics)."""
    from pymongo.errors import OperationFailure

    command = SON([("splitVector", coll.full_name), ("keyPattern", {"_id": 1}), ("maxChunkSizeBytes", 1 << 62)])
    try:
        coll.database.command(command, codec_options=coll.codec_options)
        count, avg = _collection_stats(coll)
        if count <= chunk_documents:
            return {}
        # the server cuts every min(maxChunkSizeBytes / (2 * avgObjSize), maxChunkObjects) keys
        command["maxChunkSizeBytes"] = max(1, int(2 * avg * chunk_documents))
        command["maxChunkObjects"] = chunk_documents
        reply = coll.database.command(command, codec_options=coll.codec_options)
    except OperationFailure:
        return None
    grouped: dict[str, list] = {}
    for key in reply.get("splitKeys", []):
        value = key["_id"]
        grouped.setdefault(bracket_of(value).name, []).append(value)
    return grouped


def _collection_stats(coll) -> tuple[int, float]:
    """(documents, average document size in bytes) from ``collStats`` or ``$collStats``."""
    from pymongo.errors import OperationFailure

    try:
        stats = coll.database.command("collStats", coll.name)
    except OperationFailure:
        reply = list(coll.aggregate([{"$collStats": {"storageStats": {}}}]))
        stats = reply[0].get("storageStats", {}) if reply else {}
    return int(stats.get("count") or 0), float(stats.get("avgObjSize") or 0) or 1.0


def verify_nested(coll, cuts: list, rounds: int = 4) -> list:
    """The cuts (ascending by the server's sort) each ``$gte`` their predecessor by the server's query
    comparison; a cut that is not is dropped. No cuts if that never settles.
    """
    for _ in range(rounds):
        if len(cuts) < 2:
            return cuts
        confirmed = _confirmed_pairs(coll, cuts)
        bad = {i + 1 for i in range(len(cuts) - 1) if i not in confirmed}
        if not bad:
            return cuts
        cuts = [c for j, c in enumerate(cuts) if j not in bad]
    return cuts if len(cuts) < 2 or len(_confirmed_pairs(coll, cuts)) == len(cuts) - 1 else []


def _confirmed_pairs(coll, cuts: list) -> set[int]:
    """Indexes i for which the server's ``$match`` finds ``cuts[i+1] $gte cuts[i]``: over the cut values
    alone (``$documents``), or over the collection's documents where the server has no ``$documents``."""
    confirmed: set[int] = set()
    for start in range(0, len(cuts) - 1, _VERIFY_BATCH):
        pairs = range(start, min(start + _VERIFY_BATCH, len(cuts) - 1))
        values = [{"i": i, "v": cuts[i + 1]} for i in pairs]
        match = {"$or": [{"i": i, "v": {"$gte": cuts[i]}} for i in pairs]}
        found = _try(lambda values=values, match=match: list(
            coll.database.aggregate([{"$documents": values}, {"$match": match}])))
        if found is None:
            confirmed |= _confirmed_in_collection(coll, cuts, pairs)
        else:
            confirmed.update(doc["i"] for doc in found)
    return confirmed


def _confirmed_in_collection(coll, cuts: list, pairs: range) -> set[int]:
    """``_confirmed_pairs`` by finding the documents ``_id == cuts[i+1]`` with ``_id >= cuts[i]``."""
    confirmed: set[int] = set()
    by_key = {encode_value(c): i for i, c in enumerate(cuts)}
    query = {"$or": [{"$and": [{"_id": cuts[i + 1]}, {"_id": {"$gte": cuts[i]}}]} for i in pairs]}
    for doc in coll.find(query, projection={"_id": 1}):
        index = by_key.get(encode_value(doc["_id"]))
        if index is not None and index - 1 in pairs:
            confirmed.add(index - 1)
    return confirmed


def _is_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    return isinstance(value, Decimal128) and value.to_decimal().is_nan()


def _try(action: Callable[[], Any]) -> Any:
    """``action()``, or None if the server refuses it (unknown stage, memory limit, privileges)."""
    from pymongo.errors import OperationFailure

    try:
        return action()
    except OperationFailure:
        return None
