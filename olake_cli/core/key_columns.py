"""Key columns in a form Arrow can group, join and turn into Python values (shared by destinations)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def key_storage(table: pa.Table) -> pa.Table:
    """Key columns as plain values that can be joined, grouped and turned into Python values: extension
    types (uuid, json) as their storage, dates and times as their integer counts, and nested keys
    (MongoDB documents, PostgreSQL intervals and arrays), which Arrow cannot join or group on, as
    bytes that are equal exactly when the values are (``_key_bytes``)."""
    columns = []
    for column in table.columns:
        plain = _plain_key_type(column.type)
        if plain != column.type:
            column = column.cast(plain)
        if pa.types.is_nested(plain):
            column = pa.chunked_array([_key_bytes(chunk) for chunk in column.chunks], pa.binary())
        columns.append(column)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _key_bytes(array: pa.Array) -> pa.Array:
    """Each value of a (plain-typed) array as self-delimiting bytes, computed column-wise: ``N`` for
    null, ``V<length>:<text or bytes>`` for a scalar, ``L<length>:<elements>`` for a list and ``S`` then
    the fields for a struct."""
    kind = array.type
    if pa.types.is_struct(kind):
        fields = [_key_bytes(array.field(i)) for i in range(kind.num_fields)]
        encoded = pc.binary_join_element_wise(pa.scalar(b"S"), *fields, b"")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        first, last = array.offsets[0].as_py(), array.offsets[-1].as_py()
        elements = _key_bytes(array.values.slice(first, last - first))
        offsets = pc.subtract(array.offsets, first) if first else array.offsets
        encoded = _length_prefixed(b"L", pc.binary_join(type(array).from_arrays(offsets, elements), b""))
    else:
        if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_fixed_size_binary(kind)):
            array = array.cast(pa.string())  # numbers, decimals, booleans and text by their exact text
        encoded = _length_prefixed(b"V", array.cast(pa.binary()))
    return pc.if_else(array.is_null(), pa.scalar(b"N"), encoded)


def _length_prefixed(tag: bytes, values: pa.Array) -> pa.Array:
    length = pc.binary_length(values).cast(pa.string()).cast(pa.binary())
    return pc.binary_join_element_wise(pa.scalar(tag), length, pa.scalar(b":"), values, b"")


def _plain_key_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with extension types as their storage and temporal types as integers, at any depth."""
    if isinstance(kind, pa.BaseExtensionType):
        return _plain_key_type(kind.storage_type)
    if pa.types.is_date32(kind):
        return pa.int32()
    if pa.types.is_timestamp(kind) or pa.types.is_time64(kind):
        return pa.int64()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_plain_key_type(f.type)) for f in kind])
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_plain_key_type(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_plain_key_type(kind.value_type)))
    return kind
