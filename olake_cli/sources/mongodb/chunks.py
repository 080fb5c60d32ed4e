"""Full-load chunk planning on ``_id``: every type bracket present, each cut into ranges.

1. Which brackets ``_id`` has: ``find_one({_id: {$type: <types of the brackets not found yet>}})``
   until nothing is left (one index seek per bracket on MongoDB; the type list covers every BSON type
   an ``_id`` can have, so no document is left out whatever order the server sorts types in).
2. Where to cut a bracket, first that works: ``splitVector`` over the whole ``_id`` index (mongod
   with the privilege; mongos and SecantusDB have none), ``$bucketAuto`` restricted to the bracket
   (exact sizes; up to ``EXACT_SPLIT_LIMIT`` documents, it sorts them all), or ``$sample``\\d ``_id``\\s
   sorted by the server. Brackets of at most ``chunk_documents`` documents are one chunk.
3. The cuts are checked: each must be ``$gte`` the previous one by the server's own query comparison
   (``verify_nested``), so the chunks' queries (see ``brackets``) partition the bracket exactly even
   on a server whose sort order and range queries disagree; cuts that fail are dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from bson.decimal128 import Decimal128
from bson.son import SON

from olake_cli.sources.mongodb.brackets import BRACKETS, BY_NAME, Bracket, bracket_chunks, bracket_of, encode_value

EXACT_SPLIT_LIMIT = 1_000_000  # $bucketAuto sorts every _id of the bracket; above this, sample
MAX_SAMPLE = 50_000
_VERIFY_BATCH = 500


@dataclass
class ChunkPlan:
    """Chunk bounds in state form, how each bracket was split, and what the planner noticed."""

    bounds: list[tuple[list, list]]
    methods: dict[str, str] = field(default_factory=dict)  # bracket -> whole|splitVector|bucketAuto|sample
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """``objectId: 12 (splitVector), number: 1 (whole)`` for logs."""
        counts: dict[str, int] = {}
        for lo, _ in self.bounds:
            counts[lo[0]] = counts.get(lo[0], 0) + 1
        return ", ".join(f"{name}: {n} ({self.methods.get(name, 'whole')})" for name, n in counts.items())


def plan_chunks(coll, chunk_documents: int) -> ChunkPlan:
    """Chunks of about ``chunk_documents`` documents covering every ``_id`` of ``coll`` exactly once.

    ``coll`` must decode with ``BSON_CODEC_OPTIONS``. An empty collection gets one chunk (the whole
    ObjectId bracket), so a load always has a chunk to complete.
    """
    present = present_brackets(coll)
    if not present:
        return ChunkPlan(bracket_chunks(BY_NAME["objectId"], []), {"objectId": "whole"})
    split_keys = split_vector_keys(coll, chunk_documents) if any(b.splittable for b in present) else None
    plan = ChunkPlan([])
    for bracket in present:
        cuts, method = _bracket_cuts(coll, bracket, chunk_documents, split_keys)
        cuts = [c for c in cuts if not _is_nan(c)]  # $gte NaN matches only NaN: NaN stays in chunk 0
        checked = verify_nested(coll, bracket, cuts)
        if len(checked) < len(cuts):
            plan.warnings.append(
                f"{len(cuts) - len(checked)} of {len(cuts)} cut(s) between {bracket.name} _id values failed the "
                "server's range check (its range queries disagree with its sort order, or a document was "
                "deleted meanwhile) and were dropped: those chunks are larger, no document is lost")
        plan.methods[bracket.name] = method if checked else "whole"
        plan.bounds.extend(bracket_chunks(bracket, checked))
    return plan


def present_brackets(coll) -> list[Bracket]:
    """The brackets at least one ``_id`` belongs to, in MongoDB's type order."""
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


def _bracket_cuts(coll, bracket: Bracket, chunk_documents: int,
                  split_keys: dict[str, list] | None) -> tuple[list, str]:
    """(ascending cut values, method) for one bracket."""
    if not bracket.splittable:
        return [], "whole"
    if split_keys is not None:
        return split_keys.get(bracket.name, []), "splitVector"
    count = coll.count_documents({"_id": {"$type": list(bracket.types)}})
    pieces = math.ceil(count / max(1, chunk_documents))
    if pieces <= 1:
        return [], "whole"
    if count <= EXACT_SPLIT_LIMIT:
        cuts = _try(lambda: bucket_auto_cuts(coll, bracket, pieces))
        if cuts is not None:
            return cuts, "bucketAuto"
    total = max(count, _try(coll.estimated_document_count) or count)
    cuts = _try(lambda: sampled_cuts(coll, bracket, pieces, count, total))
    return (cuts, "sample") if cuts is not None else ([], "whole")


def split_vector_keys(coll, chunk_documents: int) -> dict[str, list] | None:
    """``splitVector`` cuts over the whole ``_id`` index, grouped by bracket; None when the server
    has no such command (mongos, SecantusDB, Atlas tiers) or the user lacks the privilege."""
    from pymongo.errors import OperationFailure

    try:
        count, avg = _collection_stats(coll)
        if count <= chunk_documents:
            return {}
        # the server cuts every min(maxChunkSizeBytes / (2 * avgObjSize), maxChunkObjects) keys
        command = SON([("splitVector", coll.full_name), ("keyPattern", {"_id": 1}),
                       ("maxChunkSizeBytes", max(1, int(2 * avg * chunk_documents))),
                       ("maxChunkObjects", chunk_documents)])
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


def bucket_auto_cuts(coll, bracket: Bracket, pieces: int) -> list:
    """Cuts between ``pieces`` equal buckets of the bracket's ``_id``\\s (``$bucketAuto``)."""
    pipeline = [{"$match": {"_id": {"$type": list(bracket.types)}}},
                {"$bucketAuto": {"groupBy": "$_id", "buckets": pieces}}]
    buckets = list(coll.aggregate(pipeline, allowDiskUse=True))
    return [bucket["_id"]["min"] for bucket in buckets[1:]]


def sampled_cuts(coll, bracket: Bracket, pieces: int, count: int, total: int) -> list:
    """Cuts at the quantiles of a ``$sample`` of the bracket's ``_id``\\s, sorted by the server."""
    wanted = min(count, max(64 * pieces, 1000), MAX_SAMPLE)
    size = max(1, min(total, MAX_SAMPLE, math.ceil(wanted * total / max(count, 1))))
    pipeline = [{"$sample": {"size": size}}, {"$match": {"_id": {"$type": list(bracket.types)}}},
                {"$project": {"_id": 1}}, {"$sort": {"_id": 1}}]
    ids = [doc["_id"] for doc in coll.aggregate(pipeline, allowDiskUse=True)]
    if len(ids) < 2:
        return []
    step = len(ids) / pieces
    cuts: list = []
    for i in range(1, pieces):
        value = ids[min(len(ids) - 1, int(i * step))]
        if not cuts or encode_value(cuts[-1]) != encode_value(value):
            cuts.append(value)
    return cuts


def verify_nested(coll, bracket: Bracket, cuts: list, rounds: int = 4) -> list:
    """The cuts (ascending by the server's sort) each ``$gte`` their predecessor by the server's query
    comparison; a cut that is not (or whose document is gone) is dropped. No cuts if that never settles.
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
    """Indexes i for which the server finds the document ``_id == cuts[i+1]`` with ``_id >= cuts[i]``."""
    confirmed: set[int] = set()
    by_key = {encode_value(c): i for i, c in enumerate(cuts)}
    for start in range(0, len(cuts) - 1, _VERIFY_BATCH):
        pairs = range(start, min(start + _VERIFY_BATCH, len(cuts) - 1))
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
