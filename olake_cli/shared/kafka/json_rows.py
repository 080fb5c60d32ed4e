"""JSON texts of a table's columns a column at a time (Arrow compute, as ``core.record_lines`` builds
RECORD lines), for the envelope's message keys and for whole envelopes of plain rows.

A column's texts are its RECORD wire values as JSON; dates and timestamps at the destination types'
infinities (int32 / int64 max and min) are the words ``"infinity"`` / ``"-infinity"``, as the wire has them.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.codec.encode import arrow_text_mask, wire_values
from olake_cli.core.codec.types import ARROW_TEXT_DAYS, ARROW_TEXT_MICROS, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from olake_cli.core.record_lines import json_texts, quoted_texts
from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID

_INSTANTS = {"date": (pa.int32(), ARROW_TEXT_DAYS), "timestamp": (pa.int64(), ARROW_TEXT_MICROS),
             "timestamptz": (pa.int64(), ARROW_TEXT_MICROS)}


def infinities(raw: int, olake_type: str) -> int | str:
    """An instant outside years 1..9999 (``codec.encode.InstantReader``): the destination types'
    infinities as their wire words, other values as they are."""
    top, bottom = (INT32_MAX, INT32_MIN) if olake_type == "date" else (INT64_MAX, INT64_MIN)
    return "infinity" if raw == top else "-infinity" if raw == bottom else raw


def column_texts(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str, prop: dict) -> pa.Array:
    """One column's wire values as JSON texts (``null`` for nulls)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    instant = _INSTANTS.get(olake_type)
    nested_instants = instant is None and ("date" in olake_type or "timestamp" in olake_type)
    if nested_instants or (instant is not None and len(array)
                           and arrow_text_mask(array.view(instant[0]), instant[1]) is not None):
        values = wire_values(array, olake_type, column, prop, infinities)
        return pa.array([orjson.dumps(v).decode() for v in values], pa.string())
    return json_texts(array, olake_type, column, prop)


def object_texts(names: list[str], texts: list[pa.Array]) -> pa.Array | str:
    """``{"name": text, ...}`` per row (``{}`` for no names)."""
    if not names:
        return "{}"
    pieces: list = []
    for name, text in zip(names, texts):
        pieces += [("," if pieces else "{") + orjson.dumps(name).decode() + ":", text]
    pieces.append("}")
    return pc.binary_join_element_wise(*pieces, "")


def plain_envelopes(table: pa.Table, texts: dict[str, pa.Array], key: pa.Array | str, load_id: str | None,
                    stream: dict) -> pa.Array:
    """Whole JSON envelopes of rows none of which leaves a TOASTed value out (``texts``: the columns' JSON
    texts; ``key``: the key objects' texts, or ``null``); a delete's ``after`` is null."""
    ops = table.column(OP).combine_chunks()
    commit = table.column(COMMIT_TS).combine_chunks().cast(pa.timestamp("us", tz="UTC"))
    load = "null" if load_id is None else orjson.dumps(load_id).decode()
    after = pc.if_else(pc.equal(ops, "d"), "null", object_texts(list(texts), list(texts.values())))
    pieces = ['{"v":1,"op":', quoted_texts(ops), ',"after":', after,
              ',"key":', key, ',"op_id":', quoted_texts(table.column(OP_ID).combine_chunks()),
              ',"commit_ts":', column_texts(commit, "timestamptz", COMMIT_TS, {}),
              ',"load_id":', pc.if_else(pc.equal(ops, "r"), load, "null"),
              ',"stream":' + orjson.dumps(stream).decode() + "}"]
    return pc.binary_join_element_wise(*pieces, "")
