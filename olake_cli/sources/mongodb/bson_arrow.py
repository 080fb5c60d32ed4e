"""Raw BSON documents straight into an Arrow record batch, a field at a time across all documents.

``raw_batch(data, json_schema)`` takes a buffer of concatenated BSON documents (one cursor batch, as
``find_raw_batches`` yields it) and walks every document at once with numpy: for each property of
the stream's json_schema, in order, it checks in one step that each document's next element has the
property's name, then gathers the values of every document that has it. No Python object is made
per document or per value, with three exceptions: each document's start offset is read in a loop,
and ``bson`` values (canonical Extended JSON) and Decimal128 texts outside the plain notation (an
exponent above 0, NaN, a coefficient of 2^64 or more) and doubles in a ``decimal128`` field are made
by ``bson_ejson`` and ``bson_scalars``, one value at a time.

The walk takes the regular layout: the fields of each (sub-)document in the schema's order, any of
them missing, each value of a BSON type its field's x-olake-type takes as it is (see ``bson_types``),
or null. Anything else (fields in another order, a field the schema lacks, a value of another type,
a BSON symbol or regex) makes ``raw_batch`` return None, and the caller converts the batch with
``bson_types.documents_to_batch``, which gives the same batch or names the misfit (and drift widens
from there). ``tests/test_bson_arrow.py`` holds both paths to the same result, value for value.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from olake_cli.core.codec.types import element_property, field_arrow_type, olake_type_of, sub_properties
from olake_cli.sources.mongodb.bson_ejson import ejson_text
from olake_cli.sources.mongodb.bson_misfits import FieldMisfit
from olake_cli.sources.mongodb.bson_raw import (
    IS_NULL, PAD, Refused, Slots, bytes_at, document_starts, element_value, i32, i64, value_sizes, walk,
)
from olake_cli.sources.mongodb.bson_scalars import number_text

_HEX = np.frombuffer(b"".join(f"{i:02x}".encode() for i in range(256)), np.uint8).reshape(256, 2)
_DIGITS = 20  # of a uint64
_BID_SPECIAL = np.uint64(3 << 61)
_HIGH_COEFFICIENT = np.uint64(0x1_FFFF_FFFF_FFFF)


def raw_batch(data: bytes, json_schema: dict) -> pa.RecordBatch | None:
    """The documents of ``data`` as a record batch of ``arrow_schema(json_schema)``; None when a
    document leaves the regular layout (then ``bson_types.documents_to_batch`` decides)."""
    from olake_cli.core.codec.types import arrow_schema

    schema = arrow_schema(json_schema)
    try:
        starts = document_starts(data)
        buf = np.frombuffer(data + PAD, np.uint8)
        sizes = i32(buf, starts)
        slots = walk(buf, starts + 4, starts + sizes - 1, np.ones(len(starts), bool),
                     json_schema.get("properties", {}))
        arrays = [_column(buf, slots[f.name], json_schema["properties"][f.name], f.name, f.nullable)
                  for f in schema]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
    except (Refused, IndexError, ValueError, pa.ArrowInvalid, struct.error):
        return None


# ----------------------------------------------------------------------------- columns


def _column(buf: np.ndarray, slots: Slots, prop: dict, path: str, nullable: bool) -> pa.Array:
    """One field's values as an Arrow array of its x-olake-type."""
    olake_type = olake_type_of(prop, path)
    valid = slots.present & ~IS_NULL[slots.kind]
    if olake_type == "bson":
        return _bson_column(buf, slots, valid, path, nullable)
    if olake_type == "document":
        array = _document_column(buf, slots, valid, prop, path)
    elif olake_type.startswith("array<"):
        array = _list_column(buf, slots, valid, prop, olake_type, path)
    else:
        array = _scalar_column(buf, slots, valid, olake_type)
    if not nullable and array.null_count:
        raise Refused
    return array


def _only(slots: Slots, valid: np.ndarray, *codes: int) -> None:
    """Refused unless every valid value has one of these BSON types."""
    allowed = np.zeros(256, bool)
    allowed[list(codes)] = True
    if not allowed[slots.kind[valid]].all():
        raise Refused


def _scalar_column(buf: np.ndarray, slots: Slots, valid: np.ndarray, olake_type: str) -> pa.Array:
    value = slots.value
    mask = None if valid.all() else ~valid
    if olake_type == "bool":
        _only(slots, valid, 0x08)
        flags = buf[value]
        if (flags[valid] > 1).any():
            raise Refused
        return pa.array(flags.astype(bool), pa.bool_(), mask=mask)
    if olake_type == "int32":
        _only(slots, valid, 0x10)
        return pa.array(i32(buf, value).astype(np.int32), pa.int32(), mask=mask)
    if olake_type in ("int64", "float64", "datetime_ms"):
        return _eight_byte_column(buf, slots, valid, olake_type, mask)
    if olake_type == "string":
        _only(slots, valid, 0x02)
        array = _strings(buf, value + 4, np.where(valid, i32(buf, value) - 1, 0), valid, pa.string())
        array.validate(full=True)  # UTF-8, as the decoder requires
        return array
    if olake_type == "objectid":
        _only(slots, valid, 0x07)
        hexes = _HEX[bytes_at(buf, value[valid], 12)].reshape(-1)
        return _from_parts(pa.string(), valid, np.where(valid, 24, 0), hexes)
    if olake_type in ("bytes", "uuid"):
        return _binary_column(buf, slots, valid, olake_type)
    if olake_type == "decimal128":
        return _decimal_column(buf, slots, valid)
    raise Refused  # not a MongoDB type: the converter names the problem


def _eight_byte_column(buf, slots: Slots, valid, olake_type: str, mask) -> pa.Array:
    kind, value = slots.kind, slots.value
    if olake_type == "datetime_ms":
        _only(slots, valid, 0x09)
        return pa.array(i64(buf, value), pa.int64(), mask=mask).cast(pa.timestamp("ms", "UTC"))
    if olake_type == "int64":
        _only(slots, valid, 0x10, 0x12)
        return pa.array(_integers(buf, kind, value, valid), pa.int64(), mask=mask)
    _only(slots, valid, 0x01, 0x10, 0x12)
    doubles = np.ascontiguousarray(bytes_at(buf, value, 8)).view("<f8").ravel().copy()
    whole = valid & (kind != 0x01)
    if whole.any():
        integers = _integers(buf, kind, value, whole)[whole]
        as_double = integers.astype(np.float64)
        with np.errstate(invalid="ignore"):
            if (as_double.astype(np.int64) != integers).any() or (np.abs(as_double) >= 2.0**63).any():
                raise Refused  # an int64 that is not exactly a double
        doubles[whole] = as_double
    return pa.array(doubles, pa.float64(), mask=mask)


def _integers(buf: np.ndarray, kind: np.ndarray, value: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """int32 and int64 values as int64 (0 elsewhere)."""
    out = np.zeros(len(kind), np.int64)
    small, large = valid & (kind == 0x10), valid & (kind == 0x12)
    out[small] = i32(buf, value[small])
    out[large] = i64(buf, value[large])
    return out


def _binary_column(buf: np.ndarray, slots: Slots, valid: np.ndarray, olake_type: str) -> pa.Array:
    _only(slots, valid, 0x05)
    value = slots.value
    lengths = np.where(valid, i32(buf, value), 0)
    subtypes = buf[value + 4][valid]
    if olake_type == "bytes":
        if (subtypes != 0).any():
            raise Refused
        return _strings(buf, value + 5, lengths, valid, pa.binary())
    if (subtypes != 4).any() or (lengths[valid] != 16).any():
        raise Refused
    data = bytes_at(buf, value + 5, 16).reshape(-1)  # every row: a null's 16 bytes are unused
    storage = pa.Array.from_buffers(pa.binary(16), len(valid), [_validity(valid), pa.py_buffer(data.tobytes())])
    return pa.ExtensionArray.from_storage(pa.uuid(), storage)


def _decimal_column(buf: np.ndarray, slots: Slots, valid: np.ndarray) -> pa.Array:
    """Decimal128 text: plain-notation Decimal128s and integers vectorised, the rest one by one."""
    _only(slots, valid, 0x13, 0x10, 0x12, 0x01)
    kind, value = slots.kind, slots.value
    texts: list[Any] = [None] * len(kind)
    parts: list[tuple[np.ndarray, pa.Array]] = []
    decimals = valid & (kind == 0x13)
    plain = np.zeros(len(kind), bool)
    if decimals.any():
        words = np.ascontiguousarray(bytes_at(buf, value[decimals], 16)).view("<u8").reshape(-1, 2)
        fast, array = _plain_decimals(words[:, 0], words[:, 1])
        plain[np.flatnonzero(decimals)[fast]] = True
        parts.append((plain.copy(), array))
    integers = valid & ((kind == 0x10) | (kind == 0x12))
    if integers.any():
        parts.append((integers, pa.array(_integers(buf, kind, value, integers)[integers]).cast(pa.string())))
    one_by_one = valid & ~plain & ~integers
    for row in np.flatnonzero(one_by_one):
        texts[row] = number_text(element_value(buf, int(kind[row]), int(value[row])))
    if not one_by_one.any() and len(parts) == 1 and parts[0][0].all():
        return parts[0][1]
    rest = pa.array([texts[row] for row in np.flatnonzero(one_by_one)], pa.string())
    parts.append((one_by_one, rest))
    return _interleave(parts, len(kind))


def _interleave(parts: list[tuple[np.ndarray, pa.Array]], length: int) -> pa.Array:
    """Arrays of the rows each mask selects (in row order) put back together; other rows null."""
    order = np.full(length, -1, np.int64)
    offset = 0
    for rows, array in parts:
        order[rows] = offset + np.arange(len(array))
        offset += len(array)
    pool = pa.concat_arrays([array for _, array in parts])
    return pool.take(pa.array(order, mask=order < 0))


def _plain_decimals(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, pa.Array]:
    """(which values take the plain form, their ``str(Decimal128)`` texts): finite values with a
    coefficient below 2^64 and an exponent of at most 0 whose text has no exponent (Decimal's rule:
    exponent <= 0 and digits left of the point > -6)."""
    special = (high & _BID_SPECIAL) == _BID_SPECIAL
    exponent = ((high >> np.uint64(49)) & np.uint64(0x3FFF)).astype(np.int64) - 6176
    digits, count = _decimal_digits(low)
    left = exponent + count
    fast = ~special & ((high & _HIGH_COEFFICIENT) == 0) & (exponent <= 0) & (left > -6)
    digits, count, exponent, left = digits[fast], count[fast], exponent[fast], left[fast]
    sign = (high[fast] >> np.uint64(63)).astype(np.int64)
    zeros = np.where(left <= 0, -left, 0)  # "0." then zeros then the digits
    dot = np.where(left <= 0, 1, left)  # digits (or the "0") before the point
    point = exponent < 0
    lengths = sign + np.where(left <= 0, 2 + zeros + count, count + point)
    width = int(lengths.max()) if len(lengths) else 0
    j = np.arange(width)[None, :] - sign[:, None]  # position after the sign
    k = j - dot[:, None]  # position after the point
    from_digit = np.where(left[:, None] <= 0, k - 1 - zeros[:, None], np.where(k < 0, j, j - 1))
    digit = np.take_along_axis(digits, np.clip(_DIGITS - count[:, None] + from_digit, 0, _DIGITS - 1), axis=1)
    out = np.where(k == 0, ord("."), np.where((left[:, None] <= 0) & ((j == 0) | ((k > 0) & (k <= zeros[:, None]))),
                                              ord("0"), digit))
    out = np.where(j < 0, ord("-"), out).astype(np.uint8)
    keep = np.arange(width)[None, :] < lengths[:, None]
    return fast, _from_parts(pa.string(), np.ones(len(lengths), bool), lengths, out[keep])


def _decimal_digits(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(right-aligned ASCII digits, digit count) of uint64 values (``0`` has one digit)."""
    digits = np.empty((len(values), _DIGITS), np.uint8)
    rest = values.copy()
    count = np.ones(len(values), np.int64)
    ten = np.uint64(10)
    for place in range(_DIGITS - 1, -1, -1):
        digits[:, place] = (rest % ten).astype(np.uint8) + ord("0")
        rest //= ten
        count = np.where(rest > 0, _DIGITS - place + 1, count)
    return digits, count


def _strings(buf: np.ndarray, start: np.ndarray, lengths: np.ndarray, valid: np.ndarray,
             arrow_type: pa.DataType) -> pa.Array:
    """Variable-length values (``lengths`` bytes from ``start``) as a string or binary array."""
    lengths = np.where(valid, lengths, 0)
    if (lengths < 0).any():
        raise Refused
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    index = np.repeat(start - offsets[:-1], lengths) + np.arange(offsets[-1])
    return _from_parts(arrow_type, valid, lengths, buf[index], offsets)


def _from_parts(arrow_type: pa.DataType, valid: np.ndarray, lengths: np.ndarray, data: np.ndarray,
                offsets: np.ndarray | None = None) -> pa.Array:
    if offsets is None:
        offsets = np.concatenate([[0], np.cumsum(lengths)])
    if offsets[-1] >= 2**31:
        raise Refused
    return pa.Array.from_buffers(arrow_type, len(valid), [
        _validity(valid), pa.py_buffer(offsets.astype(np.int32).tobytes()), pa.py_buffer(data.tobytes())])


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())


def _document_column(buf: np.ndarray, slots: Slots, valid: np.ndarray, prop: dict, path: str) -> pa.Array:
    _only(slots, valid, 0x03)
    properties = sub_properties(prop, path)
    start = np.where(valid, slots.value, 0)
    inner = walk(buf, start + 4, start + i32(buf, start) - 1, valid, properties)
    struct_type = field_arrow_type(prop, path)
    children = []
    for field, (name, sub) in zip(struct_type, properties.items()):
        child = _column(buf, inner[name], sub, f"{path}.{name}", True)
        if not field.nullable and (valid & ~child.is_valid().to_numpy(zero_copy_only=False)).any():
            raise Refused
        children.append(child)
    mask = None if valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


def _list_column(buf: np.ndarray, slots: Slots, valid: np.ndarray, prop: dict, olake_type: str,
                 path: str) -> pa.Array:
    _only(slots, valid, 0x04)
    start = np.where(valid, slots.value, 0)
    cursor, end = start + 4, start + i32(buf, start) - 1
    counts = np.zeros(len(valid), np.int64)
    rows, kinds, values = [], [], []
    active = valid & (buf[cursor] != 0)
    index = 0
    while active.any():
        key = np.frombuffer(str(index).encode() + b"\0", np.uint8)
        at = cursor[active]
        if not (bytes_at(buf, at + 1, len(key)) == key).all():
            raise Refused
        kind, value = buf[at], at + 1 + len(key)
        rows.append(np.flatnonzero(active))
        kinds.append(kind)
        values.append(value)
        cursor[active] = value + value_sizes(buf, kind, value, np.ones(len(at), bool))
        counts += active
        active = active & (buf[cursor] != 0)
        index += 1
    if (valid & (cursor != end)).any():
        raise Refused
    if rows:  # row-major: each row's elements together, in their order
        order = np.lexsort((np.concatenate([np.full(len(r), i) for i, r in enumerate(rows)]), np.concatenate(rows)))
        elements = Slots(np.concatenate(kinds)[order], np.concatenate(values)[order], np.ones(len(order), bool))
    else:
        elements = Slots(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, bool))
    items = _column(buf, elements, element_property(prop, olake_type), f"{path}[]", True)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    mask = None if valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(offsets, items, type=field_arrow_type(prop, path), mask=mask)


def _bson_column(buf: np.ndarray, slots: Slots, valid: np.ndarray, path: str, nullable: bool) -> pa.Array:
    """Canonical Extended JSON of each value (one by one: ``bson_ejson.ejson_text``)."""
    null = None if nullable else "null"
    texts: list[Any] = [null] * len(valid)
    sizes = value_sizes(buf, slots.kind, slots.value, valid)
    try:
        for row in np.flatnonzero(valid):
            texts[row] = ejson_text(element_value(buf, int(slots.kind[row]), int(slots.value[row]), int(sizes[row])),
                                    int(row), path)
    except FieldMisfit:
        raise Refused from None
    return pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts, pa.string()))


__all__ = ["raw_batch"]
