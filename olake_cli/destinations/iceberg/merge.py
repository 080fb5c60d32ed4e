"""The change path of keyed streams: a batch of changes becomes rows to add and positions to delete.

Per key only the newest version of the batch counts (arrival order is operation order). The live
rows of those keys are located (``lookup.locate``) and deleted by position; the newest versions that
are not deletes are added. A version whose operation id is not above the one the table holds for
its key is dropped, so replays and retries change nothing. Columns an update did not send
(``_olake_toast_unchanged``) keep the previous value: from an earlier version in the batch, else
from the table's row. With ``soft_delete`` a delete keeps the row (previous values, ``_olake_op``
'd') instead of removing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.table import FileScanTask
from pyiceberg.table.metadata import TableMetadata

from olake_cli.core.key_columns import key_storage
from olake_cli.destinations.iceberg.lookup import PATH, POS, DeleteCache, locate, read_rows
from olake_cli.destinations.iceberg.schema import METADATA_NAMES, conform

TOAST = "_olake_toast_unchanged"
_IDX = "__olake_idx"


@dataclass
class ChangePlan:
    """What one commit of changes does to a keyed table."""

    append: pa.Table
    deletes: dict[str, list[int]] = field(default_factory=dict)  # data file path -> positions
    tasks: dict[str, FileScanTask] = field(default_factory=dict)  # data file path -> scan task
    stale: int = 0  # versions dropped because the table holds a newer one
    files_read: int = 0
    files_skipped: int = 0


def plan_changes(batch: pa.Table, key_columns: list[str], metadata: TableMetadata, io: FileIO,
                 target: pa.Schema, soft_delete: bool, watermark: str | None, table_empty: bool) -> ChangePlan:
    """Rows to add and positions to delete for ``batch`` (stream columns, _olake_* and TOAST)."""
    toast = batch.column(TOAST) if TOAST in batch.column_names else pa.nulls(batch.num_rows, pa.list_(pa.string()))
    rows = conform(batch, target).append_column(_IDX, pa.array(range(batch.num_rows), pa.int64()))
    latest = _latest_per_key(rows, key_columns)
    ops = latest.column("_olake_op")
    op_ids = latest.column("_olake_op_id")
    need_existing_ops = watermark is not None and bool(pc.any(pc.less_equal(op_ids, watermark)).as_py())
    deletes_cache = DeleteCache(io)
    if table_empty:
        live, tasks, read, skipped = _no_rows(latest, key_columns, need_existing_ops), {}, 0, 0
    else:
        found = locate(metadata, io, key_columns, latest.select(key_columns), target, need_existing_ops,
                       deletes_cache)
        live, tasks, read, skipped = found.rows, found.files, found.files_read, found.files_skipped
    plan = ChangePlan(append=latest, tasks=tasks, files_read=read, files_skipped=skipped)
    if need_existing_ops and live.num_rows:
        latest, live, plan.stale = _drop_stale(latest, live, key_columns)
    fills = _fill_sources(rows, toast, latest, key_columns, soft_delete, target)
    if fills:
        latest = _apply_fills(latest, rows, live, fills, key_columns, metadata, io, target, tasks)
    ops = latest.column("_olake_op")
    keep = pc.not_equal(ops, "d") if not soft_delete else pa.array([True] * latest.num_rows)
    plan.append = latest.filter(keep).drop_columns([_IDX])
    for path, pos in zip(live.column(PATH).to_pylist(), live.column(POS).to_pylist()):
        plan.deletes.setdefault(path, []).append(pos)
    return plan


def _latest_per_key(rows: pa.Table, key_columns: list[str]) -> pa.Table:
    """The last row (highest arrival index) of each key."""
    keys = key_storage(rows.select(key_columns + [_IDX]))
    last = keys.group_by(key_columns, use_threads=False).aggregate([(_IDX, "max")]).column(f"{_IDX}_max")
    return rows.take(pc.take(last, pc.sort_indices(last)))


def _no_rows(latest: pa.Table, key_columns: list[str], with_ops: bool) -> pa.Table:
    table = key_storage(latest.select(key_columns)).slice(0, 0).append_column(POS, pa.array([], pa.int64()))
    if with_ops:
        table = table.append_column("_olake_op_id", pa.array([], pa.string()))
    return table.append_column(PATH, pa.array([], pa.string()))


def _drop_stale(latest: pa.Table, live: pa.Table, key_columns: list[str]) -> tuple[pa.Table, pa.Table, int]:
    """Drop batch versions the table already holds a newer (or the same) version of, and their rows."""
    held = live.group_by(key_columns, use_threads=False).aggregate([("_olake_op_id", "max")])
    incoming = key_storage(latest.select(key_columns + ["_olake_op_id", _IDX]))
    joined = incoming.join(held, keys=key_columns, join_type="left outer")
    stale = pc.fill_null(pc.less_equal(joined.column("_olake_op_id"), joined.column("_olake_op_id_max")), False)
    stale_idx = joined.filter(stale).column(_IDX)
    if len(stale_idx) == 0:
        return latest, live, 0
    kept = latest.filter(pc.invert(pc.is_in(latest.column(_IDX), value_set=stale_idx)))
    stale_keys = joined.filter(stale).select(key_columns)
    marked = live.join(stale_keys.append_column("__stale", pa.array([True] * stale_keys.num_rows)),
                       keys=key_columns, join_type="left outer")
    live = marked.filter(pc.is_null(marked.column("__stale"))).drop_columns(["__stale"])
    return kept, live, len(stale_idx)


def _fill_sources(rows: pa.Table, toast: pa.ChunkedArray, latest: pa.Table, key_columns: list[str],
                  soft_delete: bool, target: pa.Schema) -> dict[tuple[int, str], int | None]:
    """(index in ``latest``, column) -> arrival index of the batch row holding the previous value,
    or None (take the table's current row) for values an update did not send or a soft delete keeps."""
    data_columns = [f.name for f in target if f.name not in METADATA_NAMES and f.name not in key_columns]
    wanted: dict[int, list[str]] = {}
    latest_idx = latest.column(_IDX).to_pylist()
    latest_toast = toast.take(latest.column(_IDX)).to_pylist()
    latest_ops = latest.column("_olake_op").to_pylist()
    for position, (listed, op) in enumerate(zip(latest_toast, latest_ops)):
        if op == "d" and soft_delete:
            wanted[position] = data_columns
        elif listed:
            wanted[position] = [c for c in listed if c in data_columns]
    if not wanted:
        return {}
    history = _history(rows, toast, key_columns, [latest_idx[p] for p in wanted])
    sources: dict[tuple[int, str], int | None] = {}
    for position, columns in wanted.items():
        earlier = [v for v in history.get(latest_idx[position], []) if v[0] < latest_idx[position]]
        for column in columns:
            sources[(position, column)] = next((i for i, op, unsent in reversed(earlier)
                                                if op != "d" and column not in unsent), None)
    return sources


def _history(rows: pa.Table, toast: pa.ChunkedArray, key_columns: list[str],
             targets: list[int]) -> dict[int, list[tuple[int, str, set[str]]]]:
    """For each target arrival index: (index, op, unsent columns) of every batch row of its key."""
    keys = [tuple(r.values()) for r in key_storage(rows.select(key_columns)).to_pylist()]
    wanted = {keys[i] for i in targets}
    by_key: dict[tuple, list[tuple[int, str, set[str]]]] = {}
    ops, unsent = rows.column("_olake_op").to_pylist(), toast.to_pylist()
    for index, key in enumerate(keys):
        if key in wanted:
            by_key.setdefault(key, []).append((index, ops[index], set(unsent[index] or ())))
    return {i: by_key[keys[i]] for i in targets}


def _apply_fills(latest: pa.Table, rows: pa.Table, live: pa.Table, fills: dict[tuple[int, str], int | None],
                 key_columns: list[str], metadata: TableMetadata, io: FileIO, target: pa.Schema,
                 tasks: dict[str, FileScanTask]) -> pa.Table:
    """``latest`` with the cells of ``fills`` replaced by the earlier batch value or the table's value."""
    columns = sorted({c for _, c in fills})
    table_rows = _current_rows(latest, live, {p for (p, _), src in fills.items() if src is None},
                               key_columns, columns, metadata, io, target, tasks)
    for column in columns:
        own = latest.column(column).combine_chunks()
        from_batch = rows.column(column).combine_chunks()
        index = list(range(latest.num_rows))
        for (position, name), source in fills.items():
            if name != column:
                continue
            if source is not None:
                index[position] = len(own) + source
            elif position in table_rows:
                index[position] = len(own) + len(from_batch) + table_rows[position][0]
        pool = pa.concat_arrays([own, from_batch, table_rows.get("__table", {}).get(column, own.slice(0, 0))])
        latest = latest.set_column(latest.schema.get_field_index(column), column,
                                   pool.take(pa.array(index, pa.int64())))
    return latest


def _current_rows(latest: pa.Table, live: pa.Table, positions: set[int], key_columns: list[str],
                  columns: list[str], metadata: TableMetadata, io: FileIO, target: pa.Schema,
                  tasks: dict[str, FileScanTask]) -> dict:
    """The table's current values for ``latest`` rows at ``positions``: {position: (row,)} and
    ``"__table"``: {column: array}."""
    if not positions or live.num_rows == 0:
        return {}
    wanted_keys = key_storage(latest.select(key_columns)).take(sorted(positions)).to_pylist()
    key_to_position = {tuple(k.values()): p for k, p in zip(wanted_keys, sorted(positions))}
    located: dict[str, list[tuple[int, int]]] = {}
    for row in live.to_pylist():
        position = key_to_position.get(tuple(row[k] for k in key_columns))
        if position is not None:
            located.setdefault(row[PATH], []).append((row[POS], position))
    out: dict = {}
    parts, count = [], 0
    for path, pairs in located.items():
        part = read_rows(io, tasks[path].file, metadata.schema(), target, [p for p, _ in pairs], columns)
        parts.append(part)
        for offset, (_, position) in enumerate(pairs):
            out[position] = (count + offset,)
        count += len(pairs)
    if parts:
        joined = pa.concat_tables(parts)
        out["__table"] = {c: joined.column(c).combine_chunks() for c in columns}
    return out
