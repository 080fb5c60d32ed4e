"""Changes a run at a time: one stream's changes in log order, a column per record data field.

A source hands the pipeline :class:`ChangeRun`s (in ``ChangeBatch.runs``). Each data field is a
column of JSON texts of the wire values (a JSON null is the text ``null``; an Arrow null leaves the
field out of that row's data, as an unchanged TOAST value or a key-only delete does), so the pipeline
filters rows with one mask and lays out RECORD lines with one element-wise join
(``record_lines.encode_change_lines``). A source that builds records a row at a time turns them into
runs with :func:`runs_of_changes`.

A *typed* run (asked for by ``sync``, which hands runs to its destination in the same process) holds
each field in its destination Arrow type instead, a field left out of a row being null there (the
decoded table does not tell the two apart either); :meth:`ChangeRun.table` gives the table the
writer adds, exactly as decoding the run's RECORD lines would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.types import arrow_schema
from olake_cli.core.opid import OpId
from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID, TOAST, WIRE_FIELDS, hex_op_id_pairs

StreamKey = tuple  # (namespace, name)
_METADATA = (OP, OP_ID, COMMIT_TS)


@dataclass
class ChangeRun:
    """Changes of one stream in log order: data fields as JSON-text columns, then per-row metadata.

    ``op`` (``c``/``u``/``d``/``t``), ``commit`` and ``seq`` (the operation id, uint64) and ``commit_ts``
    (microseconds, int64) give each record's ``_olake_op``, ``_olake_op_id`` and ``_olake_commit_ts``.
    ``replayed`` (booleans, or None for none) marks the changes made before the stream's full load began,
    which the load already holds: the source replays them so that nothing is missed, and they are
    counted apart.
    """

    stream: StreamKey
    data: dict[str, pa.Array]
    op: pa.Array
    commit: pa.Array
    seq: pa.Array
    commit_ts: pa.Array
    typed: bool = False  # data in destination Arrow types, not JSON texts
    warnings: list[str] = field(default_factory=list)  # what converting a typed run's values found
    replayed: pa.Array | None = None

    def __len__(self) -> int:
        return len(self.op)

    def op_counts(self) -> dict[str, int]:
        """How many changes of each kind (``c``, ``u``, ``d``, ``t``) the run holds."""
        return {item["values"]: item["counts"] for item in pc.value_counts(self.op).to_pylist()}

    def replay_count(self) -> int:
        """How many of the changes replay what the stream's full load already holds (see ``replayed``)."""
        return 0 if self.replayed is None else pc.sum(self.replayed).as_py() or 0

    def last_op(self) -> OpId:
        """The operation id of the run's last change (the run is not empty)."""
        return OpId(self.commit[-1].as_py(), self.seq[-1].as_py())

    def after(self, op_id: OpId | None) -> ChangeRun:
        """The changes whose operation id is above ``op_id`` (all of them for None)."""
        if op_id is None or len(self) == 0:
            return self
        commit = pa.scalar(op_id.commit, pa.uint64())
        above = pc.or_(pc.greater(self.commit, commit),
                       pc.and_(pc.equal(self.commit, commit), pc.greater(self.seq, pa.scalar(op_id.seq, pa.uint64()))))
        if pc.all(above).as_py():
            return self
        return ChangeRun(self.stream, {name: texts.filter(above) for name, texts in self.data.items()},
                         self.op.filter(above), self.commit.filter(above), self.seq.filter(above),
                         self.commit_ts.filter(above), self.typed, self.warnings,
                         None if self.replayed is None else self.replayed.filter(above))

    def table(self, json_schema: dict) -> pa.Table:
        """A typed run as a table of :func:`decoded_schema`: the stream's columns (null where a row has no
        value), then the ``_olake_*`` columns."""
        schema = decoded_schema(json_schema)
        size = len(self)
        columns = [self.data.get(f.name, pa.nulls(size, f.type)) for f in schema if f.name not in _WIRE]
        columns += [self.op, hex_op_id_pairs(self.commit, self.seq), self.commit_ts,
                    self.data.get(TOAST, pa.nulls(size, _TOAST_TYPE))]
        return pa.Table.from_arrays(columns, schema=schema)


def decoded_schema(json_schema: dict) -> pa.Schema:
    """The schema of a stream's decoded changes: its columns, all nullable, then the ``_olake_*``
    columns (operation ids as 32 hex digits)."""
    return pa.schema([f.with_nullable(True) for f in arrow_schema(json_schema)]
                     + [f.with_type(pa.string()) if f.name == OP_ID else f for f in WIRE_FIELDS])


_WIRE = frozenset(f.name for f in WIRE_FIELDS)
_TOAST_TYPE = next(f.type for f in WIRE_FIELDS if f.name == TOAST)


@dataclass
class Change:
    """One row change as a record dict: wire values plus the ``_olake_*`` fields."""

    stream: StreamKey
    op_id: OpId
    data: dict[str, Any]


def runs_of_changes(changes: list[Change]) -> list[ChangeRun]:
    """Per-row changes as runs (one per stretch of consecutive changes of a stream).

    Fields keep the order in which they first appear; a field a record lacks is left out of its line.
    """
    runs: list[ChangeRun] = []
    start = 0
    for end in range(1, len(changes) + 1):
        if end == len(changes) or changes[end].stream != changes[start].stream:
            runs.append(_run_of(changes[start:end]))
            start = end
    return runs


def _run_of(changes: list[Change]) -> ChangeRun:
    names: dict[str, None] = {}
    for change in changes:
        names.update(dict.fromkeys(k for k in change.data if k not in _METADATA))
    dumps = orjson.dumps
    columns = {name: pa.array([dumps(c.data[name]).decode() if name in c.data else None for c in changes],
                              pa.string()) for name in names}
    return ChangeRun(changes[0].stream, columns, pa.array([c.data.get(OP) for c in changes], pa.string()),
                     pa.array([c.op_id.commit for c in changes], pa.uint64()),
                     pa.array([c.op_id.seq for c in changes], pa.uint64()),
                     pa.array([c.data.get(COMMIT_TS) for c in changes], pa.int64()))
