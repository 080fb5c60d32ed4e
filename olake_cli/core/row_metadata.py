"""The ``_olake_*`` values every destination stores with each row, built a column at a time.

A record's data may carry ``_olake_op`` (``r`` full load or incremental row, ``c``/``u``/``d``
changes), ``_olake_op_id`` (a ``[commit, sequence]`` pair, stored as 32 hex digits so that text
order is operation order), ``_olake_commit_ts`` (microseconds) and ``_olake_toast_unchanged`` (the
PostgreSQL-only list of unchanged TOASTed columns: a stream whose json_schema says every update of its
source carries every value, ``"x-olake-updates-complete": true`` as MongoDB discovery writes, has none).
Rows without an operation id rank at ``default_op_id`` (a full load of a ``cdc`` stream: the position
its snapshot was taken at). The builders give the same columns from a decoded table's wire columns
(``of_block``; ``stored``: the columns every destination is handed, ``STORED_NAMES``) or for a plain
full-load batch (``of_load``).
"""

from __future__ import annotations

import binascii
import time
from dataclasses import dataclass

import numpy
import pyarrow as pa
import pyarrow.compute as pc

OP, OP_ID, COMMIT_TS, SYNCED_AT, TOAST = ("_olake_op", "_olake_op_id", "_olake_commit_ts", "_olake_synced_at",
                                         "_olake_toast_unchanged")
WIRE_FIELDS = [pa.field(OP, pa.string()), pa.field(OP_ID, pa.list_(pa.uint64())),
               pa.field(COMMIT_TS, pa.int64()), pa.field(TOAST, pa.list_(pa.string()))]
WIRE_NAMES = tuple(f.name for f in WIRE_FIELDS)
STORED_NAMES = (OP, OP_ID, COMMIT_TS, SYNCED_AT, TOAST)  # in the order ``RowMetadata.columns`` gives them
UPDATES_COMPLETE = "x-olake-updates-complete"
_TS = pa.timestamp("us", tz="UTC")


@dataclass
class RowMetadata:
    """The per-row _olake_* columns of a batch (the write time is added by ``columns``)."""

    ops: pa.Array
    op_ids: pa.Array
    commit_ts: pa.Array
    unchanged: pa.Array

    def columns(self, synced_at_us: int) -> list[pa.Array]:
        """op, op id, commit time, write time, unchanged-TOAST columns, in the documented order."""
        synced = pa.array(numpy.full(len(self.ops), synced_at_us, dtype=numpy.int64)).cast(_TS)
        return [self.ops, self.op_ids, self.commit_ts, synced, self.unchanged]


def carries_unchanged(json_schema: dict) -> bool:
    """Whether a stream's rows have ``_olake_toast_unchanged`` (not when its json_schema says every
    update carries every value)."""
    return json_schema.get(UPDATES_COMPLETE) is not True


def of_load(rows: int, default_op_id: str | None) -> RowMetadata:
    """The metadata of ``rows`` plain full-load rows."""
    op_ids = pa.nulls(rows, pa.string()) if default_op_id is None else pa.array([default_op_id] * rows, pa.string())
    return RowMetadata(pa.array(["r"] * rows, pa.string()), op_ids, pa.nulls(rows, _TS),
                       pa.nulls(rows, pa.list_(pa.string())))


def of_block(table: pa.Table, default_op_id: str | None) -> RowMetadata:
    """The metadata of a block-decoded table's ``_olake_*`` columns (``record_block``)."""
    op_ids = table.column(OP_ID).combine_chunks()
    if default_op_id is not None:
        op_ids = pc.fill_null(op_ids, default_op_id)
    return RowMetadata(pc.fill_null(table.column(OP).combine_chunks(), "r"), op_ids,
                       table.column(COMMIT_TS).combine_chunks().cast(_TS),
                       table.column(TOAST).combine_chunks())


def stored(table: pa.Table, default_op_id: str | None) -> pa.Table:
    """A decoded table with its wire ``_olake_*`` columns replaced by the stored ones (``STORED_NAMES``:
    the write time added, rows without an operation id ranking at ``default_op_id``)."""
    metadata = of_block(table, default_op_id).columns(int(time.time() * 1_000_000))
    table = table.drop_columns(list(WIRE_NAMES))
    for name, column in zip(STORED_NAMES, metadata):
        table = table.append_column(name, column)
    return table


def hex_op_ids(pairs: pa.Array) -> pa.Array:
    """``[commit, seq]`` uint64 pairs as 32 hex digits (null stays null); ValueError unless pairs."""
    lengths = pc.list_value_length(pairs)
    if not pc.all(pc.fill_null(pc.equal(lengths, 2), True)).as_py():
        raise ValueError("an operation id is not a pair")
    filled = pc.fill_null(pairs, pa.scalar([0, 0], pairs.type))
    text = _hex_digits(filled.flatten().to_numpy(zero_copy_only=False), len(pairs))
    return pc.if_else(pairs.is_valid(), text, pa.scalar(None, pa.string()))


def hex_op_id_pairs(commit: pa.Array, seq: pa.Array) -> pa.Array:
    """Operation ids given as their commit and sequence columns (uint64), as 32 hex digits."""
    pairs = numpy.empty(2 * len(commit), numpy.uint64)
    pairs[0::2] = commit.to_numpy(zero_copy_only=False)
    pairs[1::2] = seq.to_numpy(zero_copy_only=False)
    return _hex_digits(pairs, len(commit))


def _hex_digits(flat: numpy.ndarray, count: int) -> pa.Array:
    digits = binascii.hexlify(flat.astype(">u8").tobytes()).upper()
    offsets = pa.array(numpy.arange(0, 32 * count + 1, 32, dtype=numpy.int32))
    return pa.StringArray.from_buffers(count, offsets.buffers()[1], pa.py_buffer(digits))
