"""A stream's row filter and transform (seed 004): user functions over Arrow record batches.

A catalog stream may name ``"row_filter": "module:function"`` (takes a ``pyarrow.RecordBatch``, returns
a boolean array of its length: rows where it is not true are dropped) and ``"transform":
"module:function"`` (takes a ``RecordBatch``, returns one with the same rows and columns, values
changed). Both see the stream's columns in the destination's Arrow types (``codec.types.arrow_schema``, what
Parquet stores), full-load rows and changes alike; ``olake write`` and ``olake sync`` apply them before
any destination sees the rows, so every destination gets the same rows. Deletes are never filtered
(they carry only the key), and the STATEs that follow dropped rows still commit, so the stream's
position moves past them. Functions are imported by name (the module must be importable: installed or
on ``PYTHONPATH``); any failure names the stream and the function.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import CatalogError, ConfigError
from olake_cli.core.row_metadata import OP

_KEPT_OPS = ("d", "t")  # never filtered


def load_function(reference: str, what: str) -> Callable[[pa.RecordBatch], Any]:
    """The function a ``"module:function"`` reference names, or a CatalogError saying why not."""
    module_name, _, name = reference.partition(":")
    if not module_name or not name:
        raise CatalogError(f"{what}: '{reference}' is not \"module:function\"")
    try:
        found = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise CatalogError(f"{what}: cannot load '{reference}': {exc} (is the module on PYTHONPATH?)") from None
    if not callable(found):
        raise CatalogError(f"{what}: '{reference}' is not a function")
    return found


@dataclass
class RowHooks:
    """One stream's filter and transform, applied to tables of its columns (plus ``_olake_*`` columns)."""

    stream: CatalogStream
    row_filter: Callable | None
    transform: Callable | None

    @property
    def columns(self) -> list[str]:
        """The stream's columns, the ones the functions see."""
        return self.stream.columns

    def apply(self, table: pa.Table) -> pa.Table:
        """``table`` (stream columns, then any ``_olake_*`` columns) filtered and transformed."""
        if table.num_rows == 0:
            return table
        ops = table.column(OP) if OP in table.column_names else None
        if self.row_filter is not None:
            keep = self._mask(self._batch(table), ops)
            table = table.filter(keep)
            if table.num_rows == 0:
                return table
        if self.transform is not None:
            changed = self._call(self.transform, self._batch(table), "transform")
            table = self._replace_columns(table, changed)
        return table

    def _batch(self, table: pa.Table) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in self.columns], names=self.columns)

    def _mask(self, batch: pa.RecordBatch, ops: pa.ChunkedArray | None) -> pa.Array:
        result = self._call(self.row_filter, batch, "row_filter")
        try:
            mask = pa.array(result, pa.bool_()) if not isinstance(result, (pa.Array, pa.ChunkedArray)) \
                else result.cast(pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise self._error("row_filter", f"returned {type(result).__name__}, not booleans ({exc})") from None
        if len(mask) != batch.num_rows:
            raise self._error("row_filter", f"returned {len(mask)} values for {batch.num_rows} rows")
        mask = pc.fill_null(mask, False)
        if ops is not None:
            mask = pc.or_(mask, pc.fill_null(pc.is_in(ops, pa.array(_KEPT_OPS)), False))
        return mask

    def _replace_columns(self, table: pa.Table, changed: Any) -> pa.Table:
        if isinstance(changed, pa.Table):
            changed = changed.combine_chunks()
        if not isinstance(changed, (pa.RecordBatch, pa.Table)):
            raise self._error("transform", f"returned {type(changed).__name__}, not a pyarrow.RecordBatch")
        if changed.num_rows != table.num_rows or changed.schema.names != self.columns:
            raise self._error("transform", f"returned {changed.num_rows} rows of columns {changed.schema.names}; "
                                           f"expected {table.num_rows} rows of {self.columns}")
        for name in self.columns:
            target = table.schema.field(name).type
            column = changed.column(name)
            try:
                column = column if column.type == target else column.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise self._error("transform", f"column '{name}' is {column.type}, not {target}: {exc}") from None
            table = table.set_column(table.schema.get_field_index(name), name, column)
        return table

    def _call(self, function: Callable, batch: pa.RecordBatch, what: str) -> Any:
        try:
            return function(batch)
        except Exception as exc:  # user code raises anything
            raise self._error(what, f"failed: {type(exc).__name__}: {exc}") from None

    def _error(self, what: str, detail: str) -> ConfigError:
        reference = self.stream.row_filter if what == "row_filter" else self.stream.transform
        return ConfigError(f"stream {self.stream.label}: {what} '{reference}' {detail}")


def hooks_of(stream: CatalogStream) -> RowHooks | None:
    """The stream's filter and transform, loaded, or None when it names neither."""
    if not stream.row_filter and not stream.transform:
        return None
    where = f"catalog: stream '{stream.label}'"
    return RowHooks(stream, load_function(stream.row_filter, f"{where}: row_filter") if stream.row_filter else None,
                    load_function(stream.transform, f"{where}: transform") if stream.transform else None)


def catalog_hooks(catalog: Catalog) -> dict[tuple, RowHooks]:
    """Stream key -> hooks, for the selected streams that name a filter or a transform."""
    found = {s.key: hooks_of(s) for s in catalog.selected_streams()}
    return {key: hooks for key, hooks in found.items() if hooks is not None}
