"""A batch of changes reduced to one row per key, ready for set-based statements.

Per key the newest version of the batch counts (arrival order is operation order). A column an update
did not send (PostgreSQL's unchanged TOAST values, listed in ``_olake_toast_unchanged``) takes the
value of the newest earlier version of the row in the batch that carried it, following the row
across a key update (a delete of the old key directly followed, in the same transaction, by the
update under the new key). Columns still unknown stay listed, with the key of the target row that
holds their value (``_olake_from_<n>``: the old key after a key update), for the apply to read.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.key_columns import key_storage
from olake_cli.core.row_metadata import OP, OP_ID, TOAST

_IDX = "__olake_idx"


def from_column(index: int) -> str:
    """The name of the temporary column holding key column ``index`` of the row to read values from."""
    return f"_olake_from_{index}"


@dataclass
class ReducedChanges:
    """One row per key: data columns, ``_olake_op``, ``_olake_op_id``, ``_olake_commit_ts`` (µs),
    ``_olake_toast_unchanged`` (columns to read from the target, or null) and, when any are listed,
    the ``_olake_from_<n>`` key columns saying which target row to read them from."""

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
    """``latest`` rows with unsent columns filled from earlier versions; the rest left to the target."""
    keys = [tuple(row.values()) for row in key_storage(changes.select(key)).to_pylist()]
    ops, unsent = changes.column(OP).to_pylist(), changes.column(TOAST).to_pylist()
    ids = changes.column(OP_ID).to_pylist()
    previous = _previous_versions(keys, ops, ids)
    fills: dict[str, list[int]] = {}
    still: list = []
    source_rows = list(latest)  # whose key the target row to read from has
    for position, index in enumerate(latest):
        missing = list(unsent[index] or ()) if ops[index] != "d" else []
        left = []
        for column in missing:
            found, origin = _carrier(index, column, previous, ops, unsent)
            if found is not None:
                fills.setdefault(column, list(latest))[position] = found
            else:
                left.append(column)
                source_rows[position] = origin
        still.append(left or None)
    rows = changes.take(latest)
    for column, indices in fills.items():
        rows = rows.set_column(rows.schema.get_field_index(column), column, changes.column(column).take(indices))
    rows = rows.set_column(rows.schema.get_field_index(TOAST), TOAST, pa.array(still, pa.list_(pa.string())))
    unresolved = any(still)
    if unresolved:
        for number, name in enumerate(key):
            rows = rows.append_column(from_column(number), changes.column(name).take(source_rows))
    return ReducedChanges(rows, unresolved)


def _previous_versions(keys: list[tuple], ops: list[str], ids: list[str]) -> list[int | None]:
    """For each row, the row holding the version it replaced (None: the target's row), following a key
    update from the new key back to the old one."""
    last: dict[tuple, int] = {}
    before_delete: dict[tuple, int | None] = {}
    previous: list[int | None] = []
    for index, key in enumerate(keys):
        prior = last.get(key)
        if ops[index] != "d" and (prior is None or ops[prior] == "d") and _key_update(index, keys, ops, ids):
            carried = before_delete.get(keys[index - 1])
            prior = _TARGET_OF_OLD_KEY if carried is None else carried
        elif prior is not None and ops[prior] == "d":
            prior = None  # re-inserted after a delete: nothing earlier to carry
        if ops[index] == "d":
            before_delete[key] = prior
        previous.append(prior)
        last[key] = index
    return previous


_TARGET_OF_OLD_KEY = -1  # a key update whose old row is only in the target


def _key_update(index: int, keys: list[tuple], ops: list[str], ids: list[str]) -> bool:
    """Whether row ``index`` is the new row of a key update: the row before it deletes another key with
    the operation id right before its own (the same transaction)."""
    if index == 0 or ops[index - 1] != "d" or keys[index - 1] == keys[index]:
        return False
    before, mine = ids[index - 1], ids[index]
    return before is not None and mine is not None and before[:16] == mine[:16] \
        and int(before[16:], 16) + 1 == int(mine[16:], 16)


def _carrier(index: int, column: str, previous: list, ops: list[str], unsent: list) -> tuple[int | None, int]:
    """(row of the batch carrying ``column``'s value for row ``index``, or None; the row whose key
    names the target row to read it from)."""
    origin, step = index, previous[index]
    while step is not None and step >= 0:
        if ops[step] != "d" and column not in (unsent[step] or ()):
            return step, origin
        origin, step = step, previous[step]
    if step == _TARGET_OF_OLD_KEY:
        return None, origin - 1  # the delete of the old key, right before the key update
    return None, origin
