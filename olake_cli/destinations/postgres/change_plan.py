"""A batch of changes reduced to one row per key, ready for set-based statements.

Per key the newest version of the batch counts (arrival order is operation order). A column an update
did not send (PostgreSQL's unchanged TOAST values, listed in ``_olake_toast_unchanged``) takes the
value of the newest earlier version of the same key in the batch that carried it; columns still
unknown stay listed, for the apply to read from the target's row of that key. A key update arrives as
a delete of the old key and the row under the new key, whose values the source has already completed
(``sources/postgres/moved_rows``): nothing here guesses which changes belong together.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.key_columns import key_storage
from olake_cli.core.row_metadata import OP, TOAST

_IDX = "__olake_idx"


@dataclass
class ReducedChanges:
    """One row per key: data columns, ``_olake_op``, ``_olake_op_id``, ``_olake_commit_ts`` (µs) and
    ``_olake_toast_unchanged`` (columns to read from the target's row of the key, or null)."""

    rows: pa.Table
    unresolved: bool  # some columns must be read from the target


def reduce_changes(changes: pa.Table, key: list[str]) -> ReducedChanges:
    """The newest version of every key of ``changes`` (keyless streams: every row, in order)."""
    if not key:
        return ReducedChanges(changes, False)
    order = pa.array(range(changes.num_rows), pa.int64())
    grouped = key_storage(changes.select(key)).append_column(_IDX, order)
    last = grouped.group_by(key, use_threads=False).aggregate([(_IDX, "max")]).column(f"{_IDX}_max")
    latest = pc.take(last, pc.sort_indices(last)).to_pylist()
    toast = changes.column(TOAST)
    if toast.null_count == len(toast):
        return ReducedChanges(changes.take(latest), False)
    return _with_earlier_values(changes, key, latest)


def _with_earlier_values(changes: pa.Table, key: list[str], latest: list[int]) -> ReducedChanges:
    """``latest`` rows with unsent columns filled from earlier versions of their key; the rest left to
    the target."""
    keys = [tuple(row.values()) for row in key_storage(changes.select(key)).to_pylist()]
    ops, unsent = changes.column(OP).to_pylist(), changes.column(TOAST).to_pylist()
    previous = _previous_versions(keys, ops)
    fills: dict[str, list[int]] = {}
    still: list = []
    for position, index in enumerate(latest):
        missing = list(unsent[index] or ()) if ops[index] != "d" else []
        left = []
        for column in missing:
            found = _carrier(index, column, previous, ops, unsent)
            if found is not None:
                fills.setdefault(column, list(latest))[position] = found
            else:
                left.append(column)
        still.append(left or None)
    rows = changes.take(latest)
    for column, indices in fills.items():
        rows = rows.set_column(rows.schema.get_field_index(column), column, changes.column(column).take(indices))
    rows = rows.set_column(rows.schema.get_field_index(TOAST), TOAST, pa.array(still, pa.list_(pa.string())))
    return ReducedChanges(rows, any(still))


def _previous_versions(keys: list[tuple], ops: list[str]) -> list[int | None]:
    """For each row, the row of the same key holding the version it replaced (None: the target's row,
    or nothing after a delete)."""
    last: dict[tuple, int] = {}
    previous: list[int | None] = []
    for index, key in enumerate(keys):
        prior = last.get(key)
        previous.append(None if prior is None or ops[prior] == "d" else prior)
        last[key] = index
    return previous


def _carrier(index: int, column: str, previous: list, ops: list[str], unsent: list) -> int | None:
    """The row of the batch carrying ``column``'s value for row ``index``, or None (the target's row)."""
    step = previous[index]
    while step is not None:
        if column not in (unsent[step] or ()):
            return step
        step = previous[step]
    return None
