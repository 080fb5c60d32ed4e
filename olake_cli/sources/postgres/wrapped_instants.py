"""Dates and timestamps as the ADBC PostgreSQL driver yields them, read back exactly.

The driver shifts PostgreSQL's 2000-01-01 epoch to 1970 without overflow checks, so PostgreSQL's
infinities arrive wrapped around int32 (dates) and int64 (timestamps), and so do the timestamps of
its last 30 years (294247-01-10T04:00:54.775808 to 294276-12-31T23:59:59.999999). ``read_instant``
unwraps one such value for the codec's encoder; ``instant_wire_columns`` gives the wire values of a
scanned batch's date and timestamp columns (one-dimensional arrays of them too) that hold a value
outside years 1..9999, which the chunk reader hands on as its ``wire_columns``: only such values can
be wrapped, so every other column goes through the codec as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.encode import arrow_text_mask, wire_values
from olake_cli.core.codec.types import ARROW_TEXT_DAYS, ARROW_TEXT_MICROS, INT32_MIN, INT64_MIN, array_shape
from olake_cli.sources.postgres.types import PgColumn, scanned_as_text

_PG_EPOCH_US, _PG_EPOCH_DAYS = 946_684_800_000_000, 10_957
_TS_POS_INF, _TS_NEG_INF = INT64_MIN + _PG_EPOCH_US - 1, INT64_MIN + _PG_EPOCH_US
_DATE_POS_INF, _DATE_NEG_INF = INT32_MIN + _PG_EPOCH_DAYS - 1, INT32_MIN + _PG_EPOCH_DAYS
_INSTANT_TYPES = frozenset({"date", "timestamp", "timestamptz"})


def read_instant(raw: int, olake_type: str) -> int | str:
    """The codec's ``InstantReader`` for the driver's values: a date's days or a timestamp's microseconds
    since 1970 (a timestamp of PostgreSQL's last 30 years beyond int64), or an infinity word."""
    if olake_type == "date":
        return "infinity" if raw == _DATE_POS_INF else "-infinity" if raw == _DATE_NEG_INF else raw
    if raw == _TS_POS_INF:
        return "infinity"
    if raw == _TS_NEG_INF:
        return "-infinity"
    return raw + 2**64 if raw < _TS_POS_INF else raw  # PostgreSQL's last 30 years wrap


def instant_columns(columns: Iterable[PgColumn]) -> tuple[tuple[str, str], ...]:
    """(name, olake type) of the columns the scan reads natively as dates or timestamps, or as
    one-dimensional arrays of them."""
    return tuple((c.name, c.olake_type) for c in columns
                 if (array_shape(c.olake_type) or (c.olake_type,))[0] in _INSTANT_TYPES and not scanned_as_text(c))


def instant_wire_columns(batch: pa.RecordBatch, columns: Iterable[tuple[str, str]]) -> dict[str, list]:
    """Wire values of those ``columns`` (name, olake type) of ``batch`` that hold a date or timestamp
    outside years 1..9999 (values the driver may have wrapped)."""
    return {name: wire_values(batch.column(name), olake_type, name, None, read_instant)
            for name, olake_type in columns if not _all_in_arrow_years(batch.column(name))}


def _all_in_arrow_years(array: pa.Array) -> bool:
    """Whether every date or timestamp of ``array`` (its elements, for a list) lies in years 1..9999;
    True for a column of another Arrow type (the codec reports that)."""
    while pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        array = array.flatten()
    if pa.types.is_date32(array.type):
        return arrow_text_mask(array.view(pa.int32()), ARROW_TEXT_DAYS) is None
    if pa.types.is_timestamp(array.type):
        if array.type.unit != "us":
            array = pc.cast(array, pa.timestamp("us", tz=array.type.tz))
        return arrow_text_mask(array.view(pa.int64()), ARROW_TEXT_MICROS) is None
    return True
