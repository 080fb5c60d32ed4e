"""One change row's PostgreSQL texts as RECORD data, through change capture's column conversion.

Change capture converts a run of rows a column at a time (``pgtext.column_json_texts``); these
helpers apply the same conversion to one row so tests can compare it with full-load wire values.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pyarrow as pa

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.errors import SourceError
from olake_cli.core.values import UNCHANGED_TOAST
from olake_cli.sources.postgres.pgtext import column_json_texts, column_types

RowConverter = Callable[[dict], "tuple[dict, list[str]]"]


def make_row_converter(json_schema: dict, stream: str | None = None, key_columns: tuple = ()) -> RowConverter:
    """A converter of one row's texts to (RECORD data, UNCHANGED_TOAST columns) for ``json_schema``.

    A value that cannot be converted raises a SourceError naming ``stream``, the column and the
    row's ``key_columns`` (their PostgreSQL text). Columns outside ``json_schema`` are ignored.
    """
    types = column_types(json_schema)

    def convert_row(values: dict) -> tuple[dict, list[str]]:
        data: dict = {}
        toasted: list[str] = []
        for name, value in values.items():
            if name not in types:
                continue
            if value is UNCHANGED_TOAST:
                toasted.append(name)
            elif value is None:
                data[name] = None
            else:
                try:
                    json = column_json_texts(pa.array([value], pa.string()), *types[name])[0].as_py()
                except BadValue as bad:
                    key = {k: values.get(k) for k in key_columns}
                    raise value_error(SourceError, stream, name, key, None, bad.detail) from None
                data[name] = orjson.loads(json)
        return data, toasted

    return convert_row


def row_to_wire(values: dict, json_schema: dict) -> tuple[dict, list[str]]:
    """One row's texts as RECORD data plus its UNCHANGED_TOAST columns."""
    return make_row_converter(json_schema)(values)
