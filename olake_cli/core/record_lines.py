"""RECORD lines encoded a batch at a time: JSON text built column by column with Arrow compute.

Each column becomes an array of JSON texts (numbers, ``true``/``false``, escaped strings, ``null``);
one element-wise join per batch then lays out every line in ``read``'s fixed layout
(``record_prefix`` + emitted_at + data), with no Python object per row; change runs, whose fields
are JSON texts already, are laid out the same way (``encode_change_lines``). Columns whose
wire values are nested (intervals, arrays, documents) or already Python values (``wire_columns``)
are serialised value by value with orjson; a string with a control character likewise.
"""

from __future__ import annotations

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from olake_cli.core.change_runs import ChangeRun
from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.encode import wire_array
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.errors import CatalogError, SourceError

_FLOAT_WORDS = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}
_NEEDS_ORJSON = r"[\x00-\x1f]"  # control characters: JSON escapes them as \n, \u0000, ...
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'


def encode_records(batch: pa.RecordBatch, json_schema: dict, stream: str, namespace: str | None,
                   emitted_at: int, extra_data: dict | None = None, key_columns: tuple = (),
                   wire_columns: dict[str, list] | None = None) -> bytes:
    """The batch's rows as RECORD JSON lines; ``extra_data`` keys are added to every row's data.

    ``wire_columns`` gives some columns' wire values directly (a source that scanned them in its own
    text form parses them itself). A value that cannot be encoded raises a SourceError naming the
    stream, column and ``key_columns``.
    """
    if batch.num_rows == 0:
        return b""
    properties = json_schema.get("properties", {})
    names = list(batch.schema.names)
    pieces: list = []
    for name, array in zip(names, batch.columns):
        if name not in properties:
            raise CatalogError(f"column {name!r} is not a property of stream {stream!r}")
        pieces.append(("," if pieces else "{") + orjson.dumps(name).decode() + ":")
        try:
            prop = properties[name]
            if wire_columns and name in wire_columns:
                pieces.append(_json_of_values(wire_columns[name]))
            else:
                pieces.append(json_texts(array, olake_type_of(prop, name), name, prop))
        except BadValue as bad:
            key = {k: batch.column(k)[bad.index].as_py() for k in key_columns if k in names}
            label = f"{namespace}.{stream}" if namespace else stream
            raise value_error(SourceError, label, name, key, bad.index, bad.detail) from None
    for key, value in (extra_data or {}).items():
        pieces.append(("," if pieces else "{") + orjson.dumps(key).decode() + ":" + orjson.dumps(value).decode())
    head = record_prefix(namespace, stream).decode() + str(emitted_at) + ',"data":'
    if not pieces:
        return (head + "{}}}\n").encode() * batch.num_rows
    pieces[0] = head + pieces[0]
    pieces.append("}}}\n")
    lines = pc.binary_join_element_wise(*_merge_scalars(pieces), "")
    return _contiguous_bytes(lines)


def encode_change_lines(run: ChangeRun, head: bytes) -> bytes:
    """A change run's RECORD lines: ``head`` (everything up to the data object) then its fields, the
    ``_olake_op``, ``_olake_op_id`` and ``_olake_commit_ts`` last; a field whose text is null is left out."""
    if len(run) == 0:
        return b""
    pieces: list = [head.decode() + "{"]
    for name, texts in run.data.items():
        key = orjson.dumps(name).decode() + ":"
        if texts.null_count:  # left out of some rows: the key goes with the value
            pieces.append(pc.fill_null(pc.binary_join_element_wise(key, texts, ",", ""), ""))
        else:
            pieces += [key, texts, ","]
    pieces += ['"_olake_op":', quoted_texts(run.op), ',"_olake_op_id":[', pc.cast(run.commit, pa.string()), ",",
               pc.cast(run.seq, pa.string()), '],"_olake_commit_ts":',
               pc.fill_null(pc.cast(run.commit_ts, pa.string()), "null"), "}}}\n"]
    return _contiguous_bytes(pc.binary_join_element_wise(*_merge_scalars(pieces), ""))


def quoted_texts(text: pa.Array) -> pa.Array:
    """Strings that need no escaping (digits, letters, signs, '-', ':', ...) as JSON string literals."""
    return pc.fill_null(pc.binary_join_element_wise('"', text, '"', ""), "null")


def record_prefix(namespace: str | None, stream: str) -> bytes:
    """The leading bytes of every RECORD line of a stream (up to ``emitted_at``)."""
    record: dict = {"stream": stream}
    if namespace is not None:
        record["namespace"] = namespace
    return orjson.dumps({"type": "RECORD", "record": record})[:-2] + b',"emitted_at":'


def json_texts(array: pa.Array | pa.ChunkedArray, olake_type: str, column: str,
               prop: dict | None = None) -> pa.Array:
    """One column's wire values as JSON texts (a string array without nulls: ``null`` for them)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if olake_type in ("float32", "float64") and pa.types.is_floating(array.type):
        return _float_texts(array)
    values = wire_array(array, olake_type, column, prop)
    if not isinstance(values, pa.Array):
        return _json_of_values(values)
    if pa.types.is_boolean(values.type) or pa.types.is_integer(values.type):
        return pc.fill_null(pc.cast(values, pa.string()), "null")
    return _string_texts(values)


def _float_texts(array: pa.Array) -> pa.Array:
    """Shortest round-trip texts (a float32 as the float64 it is); non-finite as the wire words."""
    text = pc.cast(pc.cast(array, pa.float64()), pa.string())
    whole = pc.match_substring_regex(text, r"^-?[0-9]+$")  # "-0", "1": keep them floats ("-0.0")
    text = pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)
    for word, wire in _FLOAT_WORDS.items():
        text = pc.if_else(pc.equal(text, word), wire, text)
    return pc.fill_null(text, "null")


def _string_texts(text: pa.Array) -> pa.Array:
    """Strings as JSON string literals: quotes and backslashes escaped, control characters by orjson."""
    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        raise SourceError(f"cannot encode Arrow {text.type} as JSON text")
    if not pc.any(pc.match_substring_regex(text, _NEEDS_ESCAPE)).as_py():
        return quoted_texts(text)
    escaped = pc.replace_substring(pc.replace_substring(text, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise('"', escaped, '"', "")
    special = pc.fill_null(pc.match_substring_regex(text, _NEEDS_ORJSON), False)
    if pc.any(special).as_py():
        indices = pc.indices_nonzero(special)
        exact = [orjson.dumps(v).decode() for v in text.take(indices).to_pylist()]
        quoted = pc.replace_with_mask(quoted, special, pa.array(exact, quoted.type))
    return pc.fill_null(quoted.cast(pa.string()), "null")


def _json_of_values(values: list) -> pa.Array:
    """Python wire values serialised one by one (nested values, or values a source parsed itself)."""
    dumps = orjson.dumps
    return pa.array([dumps(v).decode() for v in values], pa.string())


def _merge_scalars(pieces: list) -> list:
    """Adjacent literal strings joined into one (fewer arguments for the element-wise join)."""
    merged: list = []
    for piece in pieces:
        if isinstance(piece, str) and merged and isinstance(merged[-1], str):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


def _contiguous_bytes(lines: pa.Array) -> bytes:
    """The concatenated values of a string array without nulls, as one bytes object."""
    offsets = memoryview(lines.buffers()[1]).cast("i")
    first, last = offsets[lines.offset], offsets[lines.offset + len(lines)]
    return memoryview(lines.buffers()[2])[first:last].tobytes()
