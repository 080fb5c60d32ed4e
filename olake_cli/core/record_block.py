"""The fast path of ``olake write``: a run of RECORD lines of one stream decoded a block at a time.

``read`` writes every RECORD of a stream with the same leading bytes (``record_prefix``), so a run
of such lines can go through pyarrow's JSON reader with an explicit schema of the wire types in
one call, and each column is then converted to its destination type by the same column decoders
as the line-by-line path. The reader is strict (a missing or extra field, a field twice, a value of
another JSON type, an integer out of range), and any refusal, anywhere in the run, returns None:
the caller then takes the line-by-line path, which validates every line and names the bad one.
Changes carry their ``_olake_*`` fields (``row_metadata``) as extra columns of the table; a run
holding a truncate takes the line path (it drops what came before it).
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from olake_cli.core.change_runs import decoded_schema
from olake_cli.core.codec.airbyte_types import is_derived
from olake_cli.core.codec.decode import decode_column, decode_rows
from olake_cli.core.codec.types import olake_type_of
from olake_cli.core.errors import OlakeError, ProtocolError
from olake_cli.core.opid import OpId
from olake_cli.core.row_metadata import OP, OP_ID, WIRE_FIELDS, WIRE_NAMES, hex_op_ids

# the Arrow type pyarrow's reader parses each wire value into (kinds absent here are not block-decoded)
_WIRE_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "float32": pa.float64(), "float64": pa.float64(), "datetime_ms": pa.int64(),
    **{kind: pa.string() for kind in ("decimal", "numeric", "string", "uuid", "json", "bytes", "date",
                                     "time", "timestamp", "timestamptz", "objectid", "decimal128", "bson")},
}
_BLOCK_SIZE = 1 << 24


class BlockDecoder:
    """Decodes runs of one stream's plain RECORD lines into tables of its destination types."""

    def __init__(self, json_schema: dict, namespace: str | None) -> None:
        self.json_schema = json_schema
        self.out_schema = decoded_schema(json_schema)
        self.schema = pa.schema([f for f in self.out_schema if f.name not in WIRE_NAMES])
        self.types: dict[str, str] = {}
        data_fields = []
        if is_derived(json_schema):  # values in Airbyte's forms: line by line (``decode_rows`` converts them)
            self.envelope = None
            return
        for name, prop in json_schema.get("properties", {}).items():
            olake_type = olake_type_of(prop, name)
            kind = olake_type.split("(")[0]
            if kind not in _WIRE_TYPES:
                self.envelope = None  # nested and interval columns: line by line
                return
            self.types[name] = olake_type
            data_fields.append(pa.field(name, _WIRE_TYPES[kind]))
        record = [pa.field("stream", pa.string())]
        if namespace is not None:
            record.append(pa.field("namespace", pa.string()))
        record += [pa.field("emitted_at", pa.int64()), pa.field("data", pa.struct(data_fields + WIRE_FIELDS))]
        self.envelope = pa.schema([pa.field("type", pa.string()), pa.field("record", pa.struct(record))])

    def decode(self, lines: bytes, warnings: list[str]) -> pa.Table | None:
        """The run's data as a table of the destination types followed by the ``_olake_*`` columns
        (op ids as 32 hex digits), or None (take the line path)."""
        if self.envelope is None:
            return None
        found: list[str] = []
        try:
            parsed = pa_json.read_json(
                io.BytesIO(lines), read_options=pa_json.ReadOptions(block_size=_BLOCK_SIZE),
                parse_options=pa_json.ParseOptions(explicit_schema=self.envelope,
                                                   unexpected_field_behavior="error"))
            record = parsed.column("record").combine_chunks()
            data = record.field("data")
            if record.null_count or data.null_count:
                return None
            children = dict(zip((f.name for f in data.type), data.flatten()))
            if pc.any(pc.equal(children[OP], "t")).as_py():
                return None
            columns = []
            for field in self.schema:
                olake_type, child = self.types[field.name], children[field.name]
                if _WIRE_TYPES[olake_type.split("(")[0]] == pa.string():
                    columns.append(decode_column(child, olake_type, field.name, found))
                else:
                    columns.append(child.cast(field.type))
            columns += [hex_op_ids(children[name]) if name == OP_ID else children[name] for name in WIRE_NAMES]
        except (OlakeError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError, OverflowError, ArithmeticError):
            return None
        warnings += found
        return pa.Table.from_arrays(columns, schema=self.out_schema)

    def decode_rows(self, rows: list[dict], warnings: list[str]) -> pa.Table:
        """RECORD data objects (any column types) as the table ``decode`` gives; a value that does not
        fit its column raises a ProtocolError or DestinationError naming the column."""
        table, found = decode_rows(rows, self.json_schema, all_nullable=True)
        warnings += found
        return pa.Table.from_arrays(table.columns + _wire_metadata(rows),
                                    names=table.column_names + list(WIRE_NAMES))


def _wire_metadata(rows: list[dict]) -> list[pa.Array]:
    """The ``_olake_*`` columns of record data objects, as ``decode`` gives them (op ids as 32 hex digits)."""
    columns = []
    for field in WIRE_FIELDS:
        values = [row.get(field.name) for row in rows]
        try:
            if field.name == OP_ID:
                columns.append(pa.array([None if v is None else OpId.from_json(v).to_key() for v in values],
                                        pa.string()))
            else:
                columns.append(pa.array(values, field.type))
        except (OlakeError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise ProtocolError(f"column {field.name!r}: {exc}") from None
    return columns
