"""A scanned batch converted straight to the destination types, column by column, with no JSON in between.

A column whose Arrow values already are the destination values is taken as it is; the others go
through the same encoder (``codec.encode``) and decoder (``codec.decode``) as the JSON path, so both
paths give identical tables.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.decode import decode_column
from olake_cli.core.codec.encode import arrow_text_mask, wire_array, wire_values
from olake_cli.core.codec.types import (
    ARROW_TEXT_DAYS, ARROW_TEXT_MICROS, arrow_schema, element_property, olake_type_of, sub_properties,
)
from olake_cli.core.errors import DestinationError


def to_destination(batch: pa.RecordBatch | pa.Table, json_schema: dict, stream: str | None = None,
                   key_columns: tuple = (), wire_columns: dict[str, list] | None = None,
                   ) -> tuple[pa.Table, list[str]]:
    """A scanned batch converted straight to the destination types (no JSON in between).

    The same per-column encoders and decoders as the JSON path, so both give identical tables; a
    value that cannot be carried names ``stream``, the column and the row's ``key_columns``.
    ``wire_columns`` gives some columns' wire values directly, as in ``encode_records``.
    """
    schema = arrow_schema(json_schema)
    schema = pa.schema([field.with_nullable(True) for field in schema], metadata=schema.metadata)
    warnings: list[str] = []
    arrays = []
    for field in schema:
        prop = json_schema["properties"][field.name]
        wire = wire_columns.get(field.name) if wire_columns else None
        try:
            arrays.append(_converted(batch.column(field.name), field, prop, wire, warnings))
        except BadValue as bad:
            key = {k: batch.column(k)[bad.index].as_py() for k in key_columns}
            raise value_error(DestinationError, stream, field.name, key, bad.index, bad.detail) from None
    return pa.Table.from_arrays(arrays, schema=schema), warnings


def _converted(column: pa.Array | pa.ChunkedArray, field: pa.Field, prop: dict, wire: list | None,
               warnings: list[str]) -> pa.Array:
    """One scanned column in its destination type (``wire``: its wire values, when the source gave them)."""
    olake_type = olake_type_of(prop, field.name)
    if wire is not None:
        return decode_column(wire, olake_type, field.name, warnings, prop)
    direct = _already_exact(column, olake_type, field.type, prop)
    if direct is not None:
        return direct
    if olake_type.split("(")[0] in _TEXT_WIRE_KINDS:  # wire texts already in an Arrow array: no Python list
        texts = wire_array(column, olake_type, field.name, prop)
        if isinstance(texts, pa.Array) and texts.type == pa.string():
            return decode_column(texts, olake_type, field.name, warnings, prop)
    values = wire_values(column, olake_type, field.name, prop)
    if olake_type == "uuid" or olake_type == "array<uuid>":
        values = _uuid_text(values)
    elif "document" in olake_type:  # uuid.UUID objects nested: the JSON text's values
        values = orjson.loads(orjson.dumps(values))
    return decode_column(values, olake_type, field.name, warnings, prop)


# kinds whose wire value is text that the encoder gives as a string array and the decoder takes as one
_TEXT_WIRE_KINDS = {"decimal", "numeric", "json"}
_PLAIN_TYPES = {"bool", "int16", "int32", "int64", "float32", "float64", "string"}
# an Arrow value of exactly the destination type is the destination value for these (BSON) types
_SAME_TYPE_EXACT = _PLAIN_TYPES | {"objectid", "decimal128", "datetime_ms", "bson", "uuid", "bytes"}


def _already_exact(array: pa.Array | pa.ChunkedArray, olake_type: str,
                   target: pa.DataType, prop: dict | None = None) -> pa.Array | None:
    """The scanned column itself when it already is the destination value (no per-value work):
    plain and BSON types (documents and arrays of them too) of the right Arrow type, and
    dates/timestamps all within years 1..9999."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if olake_type in _PLAIN_TYPES and array.type == target:
        return array
    if array.type == target and _exact_when_same_type(olake_type, prop):
        return array.view(target)  # equal types may still name a list's element differently
    if olake_type == "date" and pa.types.is_date32(array.type):
        return array if arrow_text_mask(array.view(pa.int32()), ARROW_TEXT_DAYS) is None else None
    if olake_type in ("timestamp", "timestamptz") and pa.types.is_timestamp(array.type) \
            and array.type.unit == "us" and (array.type.tz is None) == (target.tz is None):
        fast = arrow_text_mask(array.view(pa.int64()), ARROW_TEXT_MICROS)
        return array.cast(target) if fast is None else None
    return None


def _exact_when_same_type(olake_type: str, prop: dict | None) -> bool:
    """Whether every value of this (possibly nested) type is exact once its Arrow type is."""
    if olake_type in _SAME_TYPE_EXACT or olake_type.startswith("decimal("):  # decimal128(p,s) is decimal(p,s)
        return True
    if olake_type.startswith("array<") and olake_type.endswith(">"):
        return _exact_when_same_type(olake_type[6:-1], element_property(prop, olake_type))
    if olake_type == "document" and prop is not None:
        return all(_exact_when_same_type(olake_type_of(sub, name), sub)
                   for name, sub in sub_properties(prop, "?").items())
    return False


def _uuid_text(values: list) -> list:
    """uuid.UUID objects (what the encoder hands orjson) as their canonical text."""
    return [v if v is None or isinstance(v, str) else
            [None if u is None else str(u) for u in v] if isinstance(v, list) else str(v) for v in values]
