"""olake's Kafka envelope: one row or change as a message key and value, and back (JSON or MsgPack).

The key is the row's primary key as an object ``{"col": value, ...}`` in key-column order (no key: a
stream without a primary key). The value is an object (``schemas/kafka-envelope.schema.json``)::

    {"v": 1, "op": "r"|"c"|"u"|"d", "after": {column: value} | null, "key": {...} | null,
     "op_id": "<32 hex digits>" | null, "commit_ts": "<ISO 8601, µs, +00:00>" | null,
     "load_id": "<load>" | null, "toast_unchanged": [columns] (only when not empty),
     "stream": {"namespace": ..., "name": ...}}

Values are in the wire form of olake's RECORD messages (``core.codec.encode``), so ``core.codec.decode``
with the stream's json_schema reads ``after`` back exactly. A delete is its ``d`` envelope followed by a
tombstone (the same key, no value). A new full load (or a source TRUNCATE) is announced by a *load
marker*: the envelope ``{"v": 1, "op": "load", "load_id": ..., "reason": "load"|"truncate", ...}`` under
the key ``{"_olake": "load"}``, written to every partition of the topic before the load's rows: a consumer
replaces the stream's contents by the rows that follow it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.codec.encode import wire_array, wire_values
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.errors import DestinationError, ProtocolError
from olake_cli.core.row_metadata import COMMIT_TS, OP, OP_ID, TOAST
from olake_cli.core.validation import format_validation_error, load_schema
from olake_cli.shared.kafka import json_rows

VERSION = 1
FORMATS = ("json", "msgpack")
LOAD_OP = "load"  # the op of a load marker
MARKER_KEY = {"_olake": "load"}  # the key of every load marker
Message = tuple[bytes | None, bytes | None]  # (key, value); value None: a tombstone


def _msgpack_default(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} in MsgPack")


def dumps(obj: Any, fmt: str) -> bytes:
    """``obj`` as bytes of format ``fmt`` (``json``: UTF-8 JSON; ``msgpack``)."""
    if fmt == "json":
        return orjson.dumps(obj)
    import msgpack

    return msgpack.packb(obj, default=_msgpack_default, use_bin_type=True)


def loads(data: bytes, fmt: str) -> Any:
    """The object in ``data`` of format ``fmt``; ValueError when it does not parse."""
    if fmt == "json":
        return orjson.loads(data)
    import msgpack

    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(str(exc)) from None


def stream_ref(namespace: str | None, name: str) -> dict:
    """The envelope's ``stream`` object."""
    return {"namespace": namespace, "name": name}


def encode_key(key: dict | None, fmt: str) -> bytes | None:
    """A message key from the key-column values (None: no key)."""
    return None if key is None else dumps(key, fmt)


def load_marker(stream: dict, load_id: str, op_id: str | None, reason: str, fmt: str) -> Message:
    """The load marker before the rows of load ``load_id`` (``reason``: ``load`` or ``truncate``)."""
    value = {"v": VERSION, "op": LOAD_OP, "after": None, "key": None, "op_id": op_id, "commit_ts": None,
             "load_id": load_id, "reason": reason, "stream": stream}
    return dumps(MARKER_KEY, fmt), dumps(value, fmt)


def is_marker(envelope: dict) -> bool:
    """Whether a decoded envelope is a load marker."""
    return envelope.get("op") == LOAD_OP


def table_messages(table: pa.Table, json_schema: dict, key_columns: tuple[str, ...] | list[str],
                   stream: dict, load_id: str | None, fmt: str, given: dict[str, list] | None = None) -> Iterator[Message]:
    """The messages of a table of rows (destination Arrow types, or a source's scanned types, and the stored
    ``_olake_*`` columns): one per row, a tombstone after each delete (``given``: columns whose wire values
    the source gave itself, ``WireColumnsReader``). A value the wire form cannot carry raises a
    DestinationError naming the stream, the column and the row's key. JSON batches in which no row leaves
    a value out are built a column at a time; a key's bytes are the same whichever way."""
    properties = json_schema.get("properties", {})
    columns = [name for name in table.column_names if name in properties]
    given = given or {}
    keys = _keys(table, tuple(key_columns), properties, stream, fmt, given)
    if fmt == "json" and not _leaves_values_out(table):
        texts = {c: _encoded(json_rows.column_texts, table, c, properties[c], key_columns, stream, given)
                 for c in columns}
        key_texts = pc.cast(keys, pa.string()) if keys is not None else "null"
        values = json_rows.plain_envelopes(table, texts, key_texts, load_id, stream).cast(pa.binary()).to_pylist()
        key_list = keys.to_pylist() if keys is not None else [None] * len(values)
        deletes = pc.equal(table.column(OP), "d")
        if not pc.any(deletes).as_py():
            yield from zip(key_list, values)
            return
        for key, value, delete in zip(key_list, values, deletes.to_pylist()):
            yield key, value
            if delete:
                yield key, None  # the tombstone
        return
    wire = {c: _encoded(_wire, table, c, properties[c], key_columns, stream, given) for c in columns}
    ops, op_ids = table.column(OP).to_pylist(), table.column(OP_ID).to_pylist()
    commit = table.column(COMMIT_TS).combine_chunks().cast(pa.timestamp("us", tz="UTC"))
    times = [None if t == "null" else t[1:-1] for t in json_rows.column_texts(commit, "timestamptz", "", {}).to_pylist()]
    unchanged = table.column(TOAST).to_pylist() if TOAST in table.column_names else [None] * len(ops)
    rows = [dict(zip(columns, values)) for values in zip(*(wire[c] for c in columns))] if columns \
        else [{} for _ in ops]
    key_bytes = keys.to_pylist() if keys is not None else [None] * len(ops)
    for index, op in enumerate(ops):
        after = rows[index]
        value: dict[str, Any] = {"v": VERSION, "op": op, "after": None,
                                 "key": {c: after.get(c) for c in key_columns} if key_columns else None,
                                 "op_id": op_ids[index], "commit_ts": times[index],
                                 "load_id": load_id if op == "r" else None}
        toast = unchanged[index]
        if op != "d":
            for column in toast or ():
                after.pop(column, None)
            value["after"] = after
            if toast:
                value["toast_unchanged"] = list(toast)
        value["stream"] = stream
        yield key_bytes[index], dumps(value, fmt)
        if op == "d":
            yield key_bytes[index], None


def _leaves_values_out(table: pa.Table) -> bool:
    """Whether some row leaves an unchanged TOAST value out (its envelope is built on its own)."""
    if TOAST not in table.column_names:
        return False
    return pc.any(pc.fill_null(pc.greater(pc.list_value_length(table.column(TOAST)), 0), False)).as_py()


def _keys(table: pa.Table, key_columns: tuple[str, ...], properties: dict, stream: dict, fmt: str,
          given: dict[str, list]) -> pa.Array | None:
    """The message keys of the rows as a binary array (None: no key columns)."""
    if not key_columns:
        return None
    if fmt == "json":
        texts = [_encoded(json_rows.column_texts, table, c, properties[c], key_columns, stream, given)
                 for c in key_columns]
        return json_rows.object_texts(list(key_columns), texts).cast(pa.binary())
    wire = [_encoded(_wire, table, c, properties[c], key_columns, stream, given) for c in key_columns]
    return pa.array([dumps(dict(zip(key_columns, values)), fmt) for values in zip(*wire)], pa.binary())


def _wire(array: pa.ChunkedArray, olake_type: str, name: str, prop: dict) -> list:
    """A column's wire values as Python values (uuids as their texts)."""
    if olake_type == "uuid":
        return wire_array(array, olake_type, name, prop).to_pylist()
    return wire_values(array, olake_type, name, prop, json_rows.infinities)


def _encoded(encode: Any, table: pa.Table, name: str, prop: dict, key_columns, stream: dict,
             given: dict[str, list]) -> Any:
    """``encode(column, olake_type, name, prop)`` (a column of ``given``: its wire values, as the encoder
    gives them); a BadValue as a DestinationError naming stream, column and key."""
    if name in given:
        values = given[name]
        return values if encode is _wire else pa.array([orjson.dumps(v).decode() for v in values], pa.string())
    try:
        return encode(table.column(name), olake_type_of(prop, name), name, prop)
    except BadValue as bad:
        key = {k: table.column(k)[bad.index].as_py() for k in key_columns if k in table.column_names}
        label = ".".join(p for p in (stream.get("namespace"), stream["name"]) if p)
        raise value_error(DestinationError, label, name, key, bad.index, bad.detail) from None


def decode_envelope(value: bytes, fmt: str, where: str) -> dict:
    """A message value as a checked envelope; a ProtocolError naming ``where`` (topic, partition, offset)
    when it does not parse or is not olake's envelope."""
    try:
        envelope = loads(value, fmt)
    except ValueError as exc:
        raise ProtocolError(f"{where}: the value is not {fmt.upper()} ({str(exc).splitlines()[0]})") from None
    validator = _validator()
    if not validator.is_valid(envelope):
        error = best_match(validator.iter_errors(envelope))
        raise ProtocolError(format_validation_error(error, f"{where}: not olake's envelope"))
    return envelope


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(load_schema("kafka-envelope"))


def decode_key(key: bytes | None, fmt: str, where: str) -> dict | None:
    """A message key as its key-column object (None: no key); a ProtocolError naming ``where`` otherwise."""
    if key is None:
        return None
    try:
        found = loads(key, fmt)
    except ValueError as exc:
        raise ProtocolError(f"{where}: the key is not {fmt.upper()} ({str(exc).splitlines()[0]})") from None
    if not isinstance(found, dict):
        raise ProtocolError(f"{where}: the key is not an object of key columns")
    return found
