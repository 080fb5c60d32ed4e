"""PostgreSQL text output -> the destination Arrow types, a column at a time (``sync``'s change runs).

The same values as ``pgtext.column_json_texts`` followed by the writer's decoding of those JSON texts,
without the JSON in between: integers, booleans and floats are parsed by Arrow, and so are timestamps
when all of a column's have four-digit years; the types whose wire value is a string (text, json,
numeric, uuid, and dates, times and the other columns' timestamps of four-digit years) become their
wire strings by Arrow compute and go through ``codec.decode.decode_column``, as a block of RECORD
lines does; every other value is converted one by one (``pgtext.convert_or_bad``) and the column
decoded from those wire values, as the line-by-line path does.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.decode import decode_column
from olake_cli.core.codec.types import arrow_type
from olake_cli.sources.postgres.pgtext import FAST_WIRE_TEXTS, convert_or_bad

_PARSED = frozenset({"int16", "int32", "int64", "float32", "float64"})
_WIRE_IS_TEXT = frozenset({"string", "json", "numeric", "decimal", "uuid"})
_BOOL_TEXTS = pa.array(["t", "f"])
_CAST_TIMESTAMPS = frozenset({"timestamp", "timestamptz"})  # of four-digit years, ISO 8601 that Arrow parses


def column_values(texts: pa.Array, olake_type: str, column: str, warnings: list[str], prop: dict | None = None,
                  delimiter: str = ",") -> pa.Array:
    """A column's PostgreSQL texts (null: SQL NULL or no value) as an array of ``arrow_type(olake_type)``.

    A text that cannot be converted raises a BadValue at its index from ``pgtext``; a value the
    destination type cannot hold, the errors of ``decode_column`` (a BadValue at its index, or a
    ProtocolError naming the column).
    """
    kind = olake_type.split("<")[0].split("(")[0]
    if kind in _CAST_TIMESTAMPS:  # a column holding any other text (BC, infinity) takes the paths below
        try:
            return pc.cast(texts, arrow_type(olake_type))  # four-digit years: all in range
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    if kind in _PARSED:
        try:
            return pc.cast(texts, arrow_type(olake_type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a value Arrow does not parse: the one-by-one path says which
    elif kind == "bool":
        if _all(pc.is_in(texts, _BOOL_TEXTS), texts):
            return pc.equal(texts, "t")
    elif kind in _WIRE_IS_TEXT:
        return decode_column(texts, olake_type, column, warnings, prop)
    elif kind in FAST_WIRE_TEXTS:
        wire, done = FAST_WIRE_TEXTS[kind](texts)
        if wire is not None and _all(done, texts):  # (its values where a text is null are not)
            return decode_column(pc.if_else(pc.is_null(texts), pa.scalar(None, wire.type), wire), olake_type,
                                 column, warnings, prop)
    values = [None if text is None else convert_or_bad(olake_type, text, index, delimiter)
              for index, text in enumerate(texts.to_pylist())]
    return decode_column(values, olake_type, column, warnings, prop)


def _all(done: pa.Array, texts: pa.Array) -> bool:
    """Whether ``done`` holds for every value that is not null."""
    return pc.all(pc.or_(pc.fill_null(done, False), pc.is_null(texts)), min_count=0).as_py()
