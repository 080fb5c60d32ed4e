"""A feed run's rows as a ChangeRun of one stream: record fields as JSON-text columns.

Per row, inserts and updates take their data from the new tuple (an unchanged TOAST value is filled
from a REPLICA IDENTITY FULL old row, or else left out and named in ``_olake_toast_unchanged``);
deletes take it from the old tuple (the key columns only, for a key-only old tuple). Columns that
are not properties of the stream's schema are left out. A typed run (``sync``) holds each field in its
destination Arrow type (``pgtext_arrow``) instead of JSON texts.
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.errors import SourceError
from olake_cli.core.row_metadata import TOAST
from olake_cli.sources.postgres.feed_runs import FeedRun
from olake_cli.sources.postgres.pgoutput_columns import KEY_TUPLE, NULL, OLD_TUPLE, TEXT, TupleColumn
from olake_cli.sources.postgres.pgtext import column_json_texts, column_types
from olake_cli.sources.postgres.pgtext_arrow import column_values

_DELETE = ord("d")
_NULL_TEXT = pa.scalar(None, pa.string())


class RunRecords:
    """Turns feed runs of one stream into ChangeRuns (its schema's converters resolved once)."""

    def __init__(self, stream: CatalogStream, key_columns: tuple[str, ...], typed: bool = False) -> None:
        self.stream, self.key_columns, self.typed = stream, key_columns, typed
        self.types = column_types(stream.json_schema)
        self.props = stream.json_schema.get("properties", {})

    def change_run(self, run: FeedRun, keep: np.ndarray) -> ChangeRun:
        """The kept rows of ``run`` (a boolean mask) as a ChangeRun."""
        rows = None if keep.all() else np.flatnonzero(keep)
        pick = (lambda values: values) if rows is None else (lambda values: values[rows])  # noqa: E731
        ops, markers = pick(run.ops), pick(run.old_markers)
        from_old = ops == _DELETE
        data: dict[str, pa.Array] = {}
        toasted: dict[str, np.ndarray] = {}
        warnings: list[str] = []
        for i, name in enumerate(run.relation.names if run.new else ()):
            if name not in self.types:
                continue
            new, old = _rows(run.new[i], rows), _rows(run.old[i], rows)
            old_sent = (markers == OLD_TUPLE) | ((markers == KEY_TUPLE) & run.relation.key_flags[i])
            old_value = old_sent & ((old.kinds == TEXT) | (old.kinds == NULL))
            new_value = (new.kinds == TEXT) | (new.kinds == NULL)
            use_old = from_old | (~new_value & old_value)
            kinds = np.where(use_old, old.kinds, new.kinds)
            present = np.where(use_old, old_value, new_value)
            missing = ~from_old & ~present
            if missing.any():
                toasted[name] = missing
            texts = pc.if_else(pa.array(use_old), old.texts, new.texts) if use_old.any() else new.texts
            if self.typed:
                data[name] = self._values(name, texts, run, rows, warnings)
            else:
                data[name] = self._json(name, texts, kinds, present, run, rows)
        if toasted:
            data[TOAST] = _name_lists(toasted) if not self.typed else _name_arrays(toasted)
        commit_ts = pick(run.commit_ts)
        return ChangeRun((self.stream.namespace, self.stream.name), data, pa.array(ops.view("S1")).cast(pa.string()),
                         pa.array(pick(run.commit).astype(np.uint64)), pa.array(pick(run.seq).astype(np.uint64)),
                         pa.array(commit_ts), self.typed, warnings)

    def _values(self, name: str, texts: pa.Array, run: FeedRun, rows: np.ndarray | None,
                warnings: list[str]) -> pa.Array:
        """A column in its destination type (null for NULLs and where the field is left out)."""
        olake_type, delimiter = self.types[name]
        try:
            return column_values(texts, olake_type, name, warnings, self.props[name], delimiter)
        except BadValue as bad:
            raise self._bad_value(name, bad, run, rows) from None

    def _json(self, name: str, texts: pa.Array, kinds: np.ndarray, present: np.ndarray, run: FeedRun,
              rows: np.ndarray | None) -> pa.Array:
        """A column's JSON texts: ``null`` for NULLs, null where the field is left out."""
        olake_type, delimiter = self.types[name]
        try:
            json = column_json_texts(texts, olake_type, delimiter)
        except BadValue as bad:
            raise self._bad_value(name, bad, run, rows) from None
        nulls = kinds == NULL
        if nulls.any():
            json = pc.if_else(pa.array(nulls), "null", json)
        return json if present.all() else pc.if_else(pa.array(present), json, _NULL_TEXT)

    def _bad_value(self, column: str, bad: BadValue, run: FeedRun, rows: np.ndarray | None) -> Exception:
        """The error naming the stream, the column and the row's key (as PostgreSQL printed it)."""
        row = bad.index if rows is None else int(rows[bad.index])
        event = run.events()[row]
        values = (event.old if event.op == "d" else event.new) or {}
        key = {k: values.get(k) for k in self.key_columns}
        return value_error(SourceError, self.stream.label, column, key, None, bad.detail)


def _rows(column: TupleColumn, rows: np.ndarray | None) -> TupleColumn:
    return column if rows is None else column.take(rows)


def _name_arrays(toasted: dict[str, np.ndarray]) -> pa.Array:
    """Per row, the list of the columns left out as unchanged TOAST values (null: none), built from the
    masks without a Python step per row."""
    names = pa.array(list(toasted), pa.string())
    masks = np.column_stack(list(toasted.values()))  # rows x columns
    counts = masks.sum(axis=1)
    offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    values = names.take(pa.array(np.nonzero(masks)[1]))  # row by row, in column order
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(counts == 0))


def _name_lists(toasted: dict[str, np.ndarray]) -> pa.Array:
    """Per row, the JSON list of the columns left out as unchanged TOAST values (null: none)."""
    names = [pc.if_else(pa.array(mask), orjson.dumps(name).decode() + ",", "") for name, mask in toasted.items()]
    joined = pc.binary_join_element_wise(*names, "") if len(names) > 1 else names[0]
    listed = pc.binary_join_element_wise("[", pc.utf8_slice_codeunits(joined, 0, -1), "]", "")
    return pc.if_else(pc.equal(joined, ""), _NULL_TEXT, listed)
