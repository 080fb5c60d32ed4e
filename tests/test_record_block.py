"""The block path of ``olake write``: runs of RECORD lines decoded by pyarrow's JSON reader.

It must give exactly the tables of the line-by-line path, refuse (return None) anything that path
would reject or treat specially, and, through the real ``olake write``, keep line numbers in errors
and write the same Parquet files as the line path.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.codec.types import INT64_MAX, INT64_MIN
from olake_cli.core.record_lines import encode_records
from olake_cli.core import row_metadata
from olake_cli.core.record_block import BlockDecoder
from olake_cli.core.row_metadata import WIRE_NAMES
from olake_cli.core.record_lines import record_prefix
from tests.support.cli import messages, run_olake, with_stream_ends, write_json

U1 = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
TYPES = dict(i="int64", s16="int16", f4="float32", f8="float64", d="decimal(10,2)", n="numeric",
             u="uuid", j="json", b="bytes", dt="date", t="time", ts="timestamp", tz="timestamptz",
             txt="string", ok="bool", ms="datetime_ms", oid="objectid")


def schema_of(**olake_types: str) -> dict:
    return {"type": "object", "properties": {
        name: {"type": ["null", "string"], "x-olake-type": t} for name, t in olake_types.items()}}


def edge_table() -> pa.Table:
    """Every block-decoded type, with the values that take slow paths (BC, infinities, year 10000)."""
    return pa.table({
        "i": pa.array([INT64_MAX, INT64_MIN, None], pa.int64()),
        "s16": pa.array([-32768, 32767, None], pa.int16()),
        "f4": pa.array([0.1, -0.0, None], pa.float32()),
        "f8": pa.array([2.0**-1074, 1e308, -1.5], pa.float64()),
        "d": pa.array([Decimal("12.30"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
        "n": pa.array(["-" + "9" * 60 + ".5", "NaN", None]),
        "u": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([U1.bytes, None, U1.bytes], pa.binary(16))),
        "j": pa.array(['{"a":  "\\u00e9\\n"}', "[]", None], pa.json_()),
        "b": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "dt": pa.array([-2440588, 2932897, None], pa.int32()).cast(pa.date32()),
        "t": pa.array([86_400_000_000, 0, None], pa.time64("us")),
        "ts": pa.array([INT64_MAX - 1, -210866803200000000, 1], pa.int64()).cast(pa.timestamp("us")),
        "tz": pa.array([1, None, -62135596800000001], pa.int64()).cast(pa.timestamp("us", "UTC")),
        "txt": pa.array(['quote " back \\ tab \t nul \x00 ünï 😀', "", None]),
        "ok": pa.array([True, False, None]),
        "ms": pa.array([-(2**62), 0, None], pa.int64()).cast(pa.timestamp("ms", "UTC")),
        "oid": pa.array(["0123456789abcdef01234567", None, "ffffffffffffffffffffffff"]),
    })


def lines_of(table: pa.Table, json_schema: dict, namespace: str | None = "n") -> bytes:
    return b"".join(encode_records(b, json_schema, "s", namespace, 7) for b in table.to_batches())


def line_path(lines: bytes, json_schema: dict) -> tuple[pa.Table, list[str]]:
    data = [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]
    return decode_rows(data, json_schema, all_nullable=True)


@pytest.mark.parametrize("namespace", ["n", None])
def test_block_path_equals_line_path_for_every_type(namespace):
    json_schema = schema_of(**TYPES)
    lines = lines_of(edge_table(), json_schema, namespace)
    assert all(line.startswith(record_prefix(namespace, "s")) for line in lines.splitlines())
    warnings: list[str] = []
    block = BlockDecoder(json_schema, namespace).decode(lines, warnings)
    expected, expected_warnings = line_path(lines, json_schema)
    assert block is not None
    assert block.select(expected.column_names).schema == expected.schema
    assert block.column_names[len(TYPES):] == list(WIRE_NAMES)
    for name in TYPES:
        assert block.column(name).combine_chunks().equals(expected.column(name).combine_chunks()), name
    assert block.column("dt").combine_chunks().view(pa.int32()).to_pylist() == [-2440588, 2932897, None]
    assert block.column("txt").to_pylist() == edge_table().column("txt").to_pylist()
    assert warnings == expected_warnings == []


def test_decimal_nan_becomes_null_with_the_same_warning():
    json_schema = schema_of(d="decimal(5,2)")
    lines = b"".join(record_prefix("n", "s") + b'1,"data":{"d":%s}}}\n' % v for v in (b'"NaN"', b'"1.25"'))
    warnings: list[str] = []
    block = BlockDecoder(json_schema, "n").decode(lines, warnings)
    assert block.column("d").to_pylist() == [None, Decimal("1.25")]
    assert warnings == line_path(lines, json_schema)[1] == [
        "column 'd': 1 NaN value(s) stored as null in decimal(5,2)"]


REFUSED = {
    "float special value": ("f8", "float64", b'"NaN"'),
    "int out of range": ("c", "int16", b"40000"),
    "wrong JSON type": ("c", "string", b"5"),
    "object for text": ("c", "string", b'{"a":1}'),
    "bad uuid": ("c", "uuid", b'"not-a-uuid"'),
    "bad date": ("c", "date", b'"2024-02-30"'),
    "timestamp beyond Arrow": ("c", "timestamp", b'"294276-12-31T23:59:59.999999"'),
    "bad base64": ("c", "bytes", b'"@@@"'),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_values_the_line_path_rejects_or_handles_specially_are_refused(case):
    column, olake_type, value = REFUSED[case]
    line = record_prefix("n", "s") + b'1,"data":{"%s":%s}}}\n' % (column.encode(), value)
    assert BlockDecoder(schema_of(**{column: olake_type}), "n").decode(line, []) is None


@pytest.mark.parametrize("line", [
    b'1,"data":{"c":1,"x":2}}}\n',                      # a field not in the schema
    b'1,"data":{"c":1}},"extra":1}\n',                   # a field not in the envelope
    b'1,"data":{"c":1,"c":2}}}\n',                      # a field twice
    b'1}}\n',                                           # no data
    b'1,"data":null}}\n',                               # data not an object
    b'1,"data":{"c":1,"_olake_op":"t"}}}\n',            # a truncate (drops what came before it)
    b'1,"data":{"c":1,"_olake_op_id":[1]}}}\n',         # an operation id that is not a pair
    b'1,"data":{"c":1,"_olake_op_id":"x"}}}\n',         # an operation id that is not numbers
    b'1,"data":{"c":1}}}{"type":"RECORD"}\n',           # two objects on one line
    b'"x","data":{"c":1}}}\n',                          # emitted_at not an integer
])
def test_malformed_or_special_lines_are_refused(line):
    assert BlockDecoder(schema_of(c="int64"), "n").decode(record_prefix("n", "s") + line, []) is None


def test_changes_carry_their_metadata_as_the_line_path_does():
    rows = [{"c": 1, "_olake_op": "u", "_olake_op_id": [2**64 - 1, 7], "_olake_commit_ts": 5,
             "_olake_toast_unchanged": ["big"]},
            {"c": 2, "_olake_op": "d", "_olake_op_id": [0x45ADDF0, 0]},
            {"c": 3}]
    lines = b"".join(record_prefix("n", "s") + b"1,\"data\":" + orjson.dumps(r) + b"}}\n" for r in rows)
    decoder = BlockDecoder(schema_of(c="int64"), "n")
    block = decoder.decode(lines, [])
    expected = row_metadata.of_block(decoder.decode_rows(rows, []), "SNAP")
    got = row_metadata.of_block(block, "SNAP")
    for name in ("ops", "op_ids", "commit_ts", "unchanged"):
        assert getattr(got, name).equals(getattr(expected, name)), name
    assert got.op_ids.to_pylist() == ["FFFFFFFFFFFFFFFF0000000000000007", "00000000045ADDF00000000000000000", "SNAP"]


def test_nested_and_interval_streams_always_take_the_line_path():
    for olake_type in ("interval", "array<int32>"):
        line = record_prefix("n", "s") + b'1,"data":{"c":null}}}\n'
        assert BlockDecoder(schema_of(c=olake_type), "n").decode(line, []) is None


def catalog_line(json_schema: dict, *names: str) -> bytes:
    streams = [{"name": name, "namespace": "n", "json_schema": json_schema, "supported_sync_modes": ["full_refresh"],
                "sync_mode": "full_refresh", "source_defined_primary_key": [["i"]]} for name in names]
    return orjson.dumps({"type": "CATALOG", "catalog": {"streams": streams}}) + b"\n"


def state_line(cursor: str, *names: str) -> bytes:
    streams = [{"sync_type": "incremental", "stream_name": name, "stream_namespace": "n",
                "stream_state": {"cursor_field": cursor}}
               for name in names]
    return orjson.dumps({"type": "STATE", "state": {"level": "global", "version": "v1", "streams": streams}}) + b"\n"


def reordered(lines: bytes) -> bytes:
    """The same records with the envelope's keys in another order (not read's layout: line path)."""
    out = []
    for line in lines.splitlines():
        record = orjson.loads(line)["record"]
        out.append(orjson.dumps({"record": {"data": record["data"], "emitted_at": 7, "namespace": "n",
                                            "stream": record["stream"]}, "type": "RECORD"}))
    return b"\n".join(out) + b"\n"


def test_write_block_path_and_line_path_give_identical_parquet(tmp_path):
    """Interleaved streams, runs cut by STATE lines: both layouts land the same rows in Parquet."""
    json_schema = schema_of(**{k: v for k, v in TYPES.items()})
    json_schema["properties"]["i"]["type"] = "integer"
    table = edge_table()
    table = pa.concat_tables([table] * 400).set_column(0, "i", pa.array(range(1200), pa.int64()))
    a, b = (lines_of(table, json_schema).replace(b'"stream":"s"', b'"stream":"%s"' % n) for n in (b"a", b"b"))
    a_lines, b_lines = a.splitlines(keepends=True), b.splitlines(keepends=True)
    fast = (catalog_line(json_schema, "a", "b") + b"".join(a_lines[:500]) + b"".join(b_lines[:700])
            + state_line("1", "a") + b"".join(a_lines[500:]) + b"".join(b_lines[700:]) + state_line("2", "a", "b"))
    slow = (catalog_line(json_schema, "a", "b") + reordered(b"".join(a_lines[:500]) + b"".join(b_lines[:700]))
            + state_line("1", "a") + reordered(b"".join(a_lines[500:]) + b"".join(b_lines[700:]))
            + state_line("2", "a", "b"))
    landed = {}
    for name, stdin in (("fast", fast), ("slow", slow)):
        config = write_json(tmp_path / f"{name}.json", {"type": "parquet", "path": str(tmp_path / name)})
        result = run_olake("write", "--config", config, stdin=with_stream_ends(stdin))
        assert result.returncode == 0, result.stderr.decode()
        assert [m["type"] for m in messages(result.stdout)] == ["STATE", "STATE"]
        assert b"wrote 2400 record(s)" in result.stderr
        landed[name] = {s: ds.dataset(str(tmp_path / name / "n" / s)).to_table().sort_by("i")
                        .drop_columns(["_olake_synced_at"]) for s in ("a", "b")}
    for stream in ("a", "b"):
        assert landed["fast"][stream].num_rows == 1200
        assert landed["fast"][stream].equals(landed["slow"][stream]), stream
        source = table.sort_by("i")
        for name in TYPES:
            assert landed["fast"][stream].column(name).combine_chunks().equals(
                source.column(name).combine_chunks()), name


def test_a_bad_value_inside_a_run_fails_as_on_the_line_path(tmp_path):
    """The run is refused as a block; its lines go one by one and the bad value is named."""
    json_schema = schema_of(i="int64", v="string")
    good = lines_of(pa.table({"i": pa.array(range(50), pa.int64()), "v": ["x"] * 50}), json_schema)
    lines = good.splitlines(keepends=True)
    bad = lines[30].replace(b'"v":"x"', b'"v":17')
    stdin = catalog_line(json_schema, "s") + b"".join(lines[:30]) + bad + b"".join(lines[31:]) + state_line("1", "s")
    config = write_json(tmp_path / "dst.json", {"type": "parquet", "path": str(tmp_path / "out")})
    result = run_olake("write", "--config", config, stdin=stdin)
    assert result.returncode != 0
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("olake: error")]
    assert len(errors) == 1 and "column 'v'" in errors[0] and "got int" in errors[0], result.stderr.decode()
    assert [m["type"] for m in messages(result.stdout)] == ["TRACE"]
