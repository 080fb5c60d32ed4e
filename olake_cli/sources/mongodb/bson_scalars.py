"""How each scalar x-olake-type of a MongoDB stream takes a BSON value: which values fit it, and their
Arrow value and wire value (the table is in ``bson_types``'s docstring)."""

from __future__ import annotations

import binascii
import datetime as dt
import struct
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple

import pyarrow as pa
from bson import Binary, DatetimeMS, Decimal128, Int64, ObjectId

from olake_cli.core.codec.types import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from olake_cli.core.errors import CatalogError
from olake_cli.sources.mongodb.bson_schema import is_exact_double

_EPOCH, _ONE_MS = dt.datetime(1970, 1, 1), dt.timedelta(milliseconds=1)
_TWO_UINT64 = struct.Struct("<QQ")
_BID_SPECIAL, _BID_COEFFICIENT_END = 3 << 61, 10**34


def _millis(value: DatetimeMS | dt.datetime) -> int:
    if type(value) is DatetimeMS:
        return int(value)
    offset = value.utcoffset() or dt.timedelta(0)  # a naive datetime is UTC, as pymongo's
    return (value.replace(tzinfo=None) - _EPOCH - offset) // _ONE_MS


def _float_wire(value: float) -> float | str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _decimal_text(value: Decimal128) -> str:
    """``str(value)``, four times faster for finite canonical values (the same text exactly)."""
    low, high = _TWO_UINT64.unpack(value.bid)
    if high & _BID_SPECIAL == _BID_SPECIAL:  # NaN, Infinity, or a non-canonical large coefficient
        return str(value)
    coefficient = ((high & 0x1_FFFF_FFFF_FFFF) << 64) | low
    if coefficient >= _BID_COEFFICIENT_END:
        return str(value)
    sign = "-" if high >> 63 else ""
    return str(Decimal(f"{sign}{coefficient}E{((high >> 49) & 0x3FFF) - 6176}"))


def _fits_float64(value: Any) -> bool:
    kind = type(value)
    return kind is float or (kind in (int, Int64) and is_exact_double(value))


def _float64_array(values: list) -> pa.Array:
    """Doubles, and integers that are exactly doubles (Arrow refuses those beyond 2^53 unconverted)."""
    try:
        return pa.array(values, pa.float64())
    except pa.ArrowInvalid:
        return pa.array([v if v is None or type(v) is float else float(v) for v in values], pa.float64())


def number_text(value: Any) -> str:
    """A BSON number as Decimal128 text (see the module's table)."""
    kind = type(value)
    if kind is Decimal128:
        return _decimal_text(value)
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return _float_wire(value)
        return str(Decimal128(repr(value)))
    return str(int(value))


def _uuid_bytes(value: uuid.UUID | Binary) -> bytes:
    return value.bytes if type(value) is uuid.UUID else bytes(value)


def _typed(arrow: pa.DataType) -> Callable[[list], pa.Array]:
    return lambda values: pa.array(values, type=arrow)


class Scalar(NamedTuple):
    """What one scalar type does with a value: the check, the conversions, the Arrow array."""

    fast: frozenset            # value types taken without a per-value check
    fits: Callable[[Any], bool]
    to_arrow: Callable[[Any], Any] | None
    to_wire: Callable[[Any], Any]
    build: Callable[[list], pa.Array]


def _same(value: Any) -> Any:
    return value


_SCALARS: dict[str, Scalar] = {
    "bool": Scalar(frozenset({bool}), lambda v: type(v) is bool, None, _same, _typed(pa.bool_())),
    "int32": Scalar(frozenset({int}), lambda v: type(v) is int and INT32_MIN <= v <= INT32_MAX,
                    None, _same, _typed(pa.int32())),
    "int64": Scalar(frozenset({int, Int64}),
                    lambda v: type(v) in (int, Int64) and INT64_MIN <= v <= INT64_MAX,
                    None, int, _typed(pa.int64())),
    "float64": Scalar(frozenset({float}), _fits_float64, None, lambda v: _float_wire(float(v)),
                      _float64_array),
    "string": Scalar(frozenset({str}), lambda v: type(v) is str, None, _same, _typed(pa.string())),
    "objectid": Scalar(frozenset({ObjectId}), lambda v: type(v) is ObjectId, str, str,
                       _typed(pa.string())),
    "decimal128": Scalar(frozenset({Decimal128}),
                         lambda v: type(v) in (Decimal128, float, Int64) or (type(v) is int and
                                                                          INT64_MIN <= v <= INT64_MAX),
                         number_text, number_text, _typed(pa.string())),
    "datetime_ms": Scalar(frozenset({DatetimeMS}), lambda v: type(v) in (DatetimeMS, dt.datetime),
                          _millis, _millis,
                          lambda values: pa.array(values, pa.int64()).cast(pa.timestamp("ms", "UTC"))),
    "bytes": Scalar(frozenset({bytes}),
                    lambda v: type(v) is bytes or (type(v) is Binary and v.subtype == 0), None,
                    lambda v: binascii.b2a_base64(v, newline=False).decode("ascii"),
                    _typed(pa.binary())),
    "uuid": Scalar(frozenset({uuid.UUID}),
                   lambda v: type(v) is uuid.UUID or (type(v) is Binary and v.subtype == 4
                                                      and len(v) == 16),
                   _uuid_bytes, lambda v: str(uuid.UUID(bytes=_uuid_bytes(v))),
                   lambda values: pa.ExtensionArray.from_storage(
                       pa.uuid(), pa.array(values, type=pa.binary(16)))),
}


def scalar_fits(olake_type: str, value: Any) -> bool | None:
    """Whether ``value`` fits a scalar x-olake-type (None: not a MongoDB scalar type)."""
    spec = _SCALARS.get(olake_type)
    return None if spec is None else spec.fits(value)


def scalar_of(olake_type: str, path: str) -> Scalar:
    """The scalar type ``olake_type`` of the field at ``path``; a CatalogError for any other type."""
    spec = _SCALARS.get(olake_type)
    if spec is None:
        raise CatalogError(f"field {path!r}: x-olake-type {olake_type!r} is not a MongoDB type")
    return spec
