"""MongoDB change events of one stream as one ``ChangeRun``, their documents decoded all at once.

The change stream hands each event's document as raw BSON; ``capture`` keeps them as
``PendingChange``\\s until the stretch of one stream's changes ends, then ``decoded_run`` decodes them
together (``bson_arrow.raw_batch``, the full load's columnar decoder) and turns each column into the
JSON texts of its wire values (``record_lines.json_texts``), as PostgreSQL's capture does; a typed run
(``sync``) keeps the decoded columns, which are in the destination types already. A delete carries only
its ``_id``: its other fields are left out of its record (null in a typed run). When the decoder declines
(a document leaves the regular layout, or a value does not fit its field: schema drift), ``capture``
converts the stretch document by document, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.opid import OpId
from olake_cli.core.record_lines import json_texts
from olake_cli.sources.mongodb.bson_arrow import raw_batch


@dataclass
class PendingChange:
    """One change not decoded yet: its kind (``c``/``u``/``d``), the document as raw BSON (``{_id}``
    for a delete), its operation id and commit time (microseconds)."""

    op: str
    document: bytes
    op_id: OpId
    commit_ts: int


def decoded_run(stream: CatalogStream, changes: list[PendingChange], typed: bool = False) -> ChangeRun | None:
    """The changes as one run with every document decoded at once (typed: as decoded); None when the
    decoder declines."""
    properties = stream.json_schema.get("properties", {})
    batch = raw_batch(b"".join(c.document for c in changes), stream.json_schema)
    if batch is None or "_id" not in properties:
        return None
    deletes = [c.op == "d" for c in changes]
    names = [name for name in properties if name == "_id" or not all(deletes)]
    if deletes[0]:  # a record's fields in the order they first appear: a delete has its _id only
        names.sort(key=lambda name: name != "_id")
    left_out = pa.array(deletes) if any(deletes) else None
    data: dict[str, pa.Array] = {}
    for name in names:
        column = batch.column(name)
        if not typed:
            column = json_texts(column, olake_type_of(properties[name], name), name, properties[name])
        if left_out is not None and name != "_id":
            column = _null_where(left_out, column)
        data[name] = column
    return ChangeRun(stream.key, data, pa.array([c.op for c in changes], pa.string()),
                     pa.array([c.op_id.commit for c in changes], pa.uint64()),
                     pa.array([c.op_id.seq for c in changes], pa.uint64()),
                     pa.array([c.commit_ts for c in changes], pa.int64()), typed)


def _null_where(mask: pa.Array, column: pa.Array) -> pa.Array:
    """``column`` with null where ``mask`` is true (an extension type's storage masked)."""
    if isinstance(column.type, pa.BaseExtensionType):
        return pa.ExtensionArray.from_storage(column.type, _null_where(mask, column.storage))
    return pc.if_else(mask, pa.scalar(None, column.type), column)
