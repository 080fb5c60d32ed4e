"""Pure unit tests of the Arrow <-> JSON-lines codec (no database)."""

from __future__ import annotations

import uuid
from decimal import Decimal

import orjson
import pyarrow as pa
import pytest

from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.codec.encode import wire_values
from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.codec.types import INT32_MAX, INT64_MAX, INT64_MIN, arrow_schema, arrow_type
from olake_cli.core.record_lines import encode_records
from olake_cli.core.errors import CatalogError, DestinationError, ProtocolError, SourceError
from olake_cli.sources.postgres.scan import PostgresChunkReader
from olake_cli.sources.postgres.wrapped_instants import instant_wire_columns, read_instant

U1 = uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")
INTERVAL = pa.struct([("months", pa.int32()), ("days", pa.int32()), ("microseconds", pa.int64())])


def schema_of(**olake_types: str) -> dict:
    return {"type": "object", "properties": {
        name: {"type": ["null", "string"], "x-olake-type": t} for name, t in olake_types.items()}}


def roundtrip(table: pa.Table, json_schema: dict) -> tuple[pa.Table, list[str], list[dict]]:
    lines = b"".join(encode_records(b, json_schema, "s", "n", 1) for b in table.to_batches())
    data = [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]
    decoded, warnings = decode_rows(data, json_schema)
    return decoded, warnings, data


def test_arrow_types_follow_the_olake_type_strings():
    assert arrow_type("decimal(38,10)") == pa.decimal128(38, 10)
    assert arrow_type("array<timestamptz>") == pa.list_(pa.field("element", pa.timestamp("us", "UTC")))
    assert arrow_type("interval") == INTERVAL
    assert arrow_type("uuid") == pa.uuid() and arrow_type("json") == pa.json_()
    for bad in ("decimal(39,0)", "decimal(5,6)", "varchar", "array<nope>"):
        with pytest.raises(CatalogError):
            arrow_type(bad)
    schema = arrow_schema({"properties": {"a": {"type": "integer", "x-olake-type": "int64"},
                                          "b": {"type": ["null", "string"], "x-olake-type": "date"}}})
    assert [(f.name, f.type, f.nullable) for f in schema] == [("a", pa.int64(), False),
                                                             ("b", pa.date32(), True)]


def test_record_envelope_and_extra_data_are_exact():
    batch = pa.record_batch({"a": pa.array([1, None], pa.int64())})
    out = encode_records(batch, schema_of(a="int64"), "orders", "public", 42, {"_olake_op": "r"})
    assert out.splitlines(keepends=True) == [
        b'{"type":"RECORD","record":{"stream":"orders","namespace":"public","emitted_at":42,'
        b'"data":{"a":1,"_olake_op":"r"}}}\n',
        b'{"type":"RECORD","record":{"stream":"orders","namespace":"public","emitted_at":42,'
        b'"data":{"a":null,"_olake_op":"r"}}}\n']
    no_ns = encode_records(batch.slice(0, 1), schema_of(a="int64"), "orders", None, 1)
    assert orjson.loads(no_ns)["record"] == {"stream": "orders", "emitted_at": 1, "data": {"a": 1}}


def test_destination_types_round_trip_exactly():
    table = pa.table({
        "i": pa.array([INT64_MAX, INT64_MIN, None], pa.int64()),
        "f4": pa.array([0.1, float("nan"), float("-inf")], pa.float32()),
        "f8": pa.array([-0.0, float("inf"), 2.0**-1074], pa.float64()),
        "d": pa.array([Decimal("12.30"), Decimal("-0.01"), None], pa.decimal128(10, 2)),
        "u": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([U1.bytes, None, U1.bytes],
                                                                  pa.binary(16))),
        "j": pa.array(['{"a":  1}', "[]", None], pa.json_()),
        "b": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "dt": pa.array([-2440588, -719162, None], pa.int32()).cast(pa.date32()),
        "t": pa.array([86_400_000_000, 0, 86_399_999_999], pa.time64("us")),
        "ts": pa.array([INT64_MAX - 1, -210866803200000000, 1], pa.int64()).cast(pa.timestamp("us")),
        "tz": pa.array([1, None, -62135596800000001], pa.int64()).cast(pa.timestamp("us", "UTC")),
        "iv": pa.array([{"months": -1, "days": 2, "microseconds": INT64_MAX}, None,
                        {"months": 0, "days": 0, "microseconds": 0}], INTERVAL),
        "ad": pa.array([[Decimal("1.50"), None], [], None], arrow_type("array<decimal(10,2)>")),
        "ai": pa.array([[{"months": 1, "days": 0, "microseconds": 5}], None, [None]],
                       arrow_type("array<interval>")),
    })
    olake = dict(i="int64", f4="float32", f8="float64", d="decimal(10,2)", u="uuid", j="json",
                 b="bytes", dt="date", t="time", ts="timestamp", tz="timestamptz", iv="interval",
                 ad="array<decimal(10,2)>", ai="array<interval>")
    decoded, warnings, data = roundtrip(table, schema_of(**olake))
    assert warnings == []
    assert decoded.schema == table.schema
    for name in table.column_names:  # NaN != NaN in Array.equals, so floats compare as text
        if name.startswith("f"):
            assert str(decoded.column(name).to_pylist()) == str(table.column(name).to_pylist())
        else:
            assert decoded.column(name).equals(table.column(name)), name
    assert data[0]["f4"] == pytest.approx(0.1) and data[1]["f4"] == "NaN"
    assert data[2]["f4"] == "-Infinity" and data[1]["f8"] == "Infinity"
    assert data[0]["i"] == INT64_MAX and data[0]["d"] == "12.30" and data[0]["u"] == str(U1)
    assert data[0]["b"] == "AP8=" and data[0]["dt"] == "4714-11-24 BC" and data[1]["dt"] == "0001-01-01"
    assert data[0]["t"] == "24:00:00.000000" and data[2]["t"] == "23:59:59.999999"
    assert data[0]["ts"] == "294247-01-10T04:00:54.775806" and data[1]["ts"] == "4714-11-24T00:00:00.000000 BC"
    assert data[2]["ts"] == "1970-01-01T00:00:00.000001"
    assert data[2]["tz"] == "0001-12-31T23:59:59.999999+00:00 BC"
    assert data[0]["tz"] == "1970-01-01T00:00:00.000001+00:00"
    assert data[0]["ad"] == ["1.50", None] and data[2]["ai"] == [None]


def test_adbc_wrapped_infinities_and_interval_shapes_are_understood():
    wrapped_ts = pa.array([-9222425352054775809, -9222425352054775808, 0], pa.int64())
    assert wire_values(wrapped_ts.cast(pa.timestamp("us", "UTC")), "timestamptz", "c", None, read_instant) == [
        "infinity", "-infinity", "1970-01-01T00:00:00.000000+00:00"]
    wrapped_dates = pa.array([-2147472692, -2147472691, 1], pa.int32()).cast(pa.date32())
    assert wire_values(wrapped_dates, "date", "c", None, read_instant) == ["infinity", "-infinity", "1970-01-02"]
    triples = pa.array([[14, -3, 14706789000], None], pa.list_(pa.int64()))
    assert wire_values(triples, "interval", "c") == [
        {"months": 14, "days": -3, "microseconds": 14706789000}, None]
    iso = pa.array(["P1Y2M-3DT4H5M6.789S", "P-1DT-0.000001S", "PT0S", "PT-1M-0.5S"])
    assert wire_values(iso, "interval", "c") == [
        {"months": 14, "days": -3, "microseconds": 14706789000},
        {"months": 0, "days": -1, "microseconds": -1},
        {"months": 0, "days": 0, "microseconds": 0},
        {"months": 0, "days": 0, "microseconds": -60_500_000}]
    with pytest.raises(SourceError, match="'c'.*iso_8601"):
        wire_values(pa.array(["1 day"]), "interval", "c")


PG_EPOCH_US = 946_684_800_000_000


def test_every_postgresql_date_and_timestamp_is_carried_exactly():
    """ADBC's shifted values (wrapped infinities, wrapped last 30 years) -> PostgreSQL's text -> Arrow."""
    dates = pa.array([-2440588, -735160, -719163, 2932897, 2145042905, -2147472692, -2147472691, None],
                     pa.int32()).cast(pa.date32())
    assert wire_values(dates, "date", "d", None, read_instant) == [
        "4714-11-24 BC", "0044-03-15 BC", "0001-12-31 BC", "10000-01-01", "5874897-12-31",
        "infinity", "-infinity", None]
    pg_max = 9223371331199999999  # 294276-12-31 23:59:59.999999 in PostgreSQL's microseconds
    wrapped_max = pg_max + PG_EPOCH_US - 2**64
    stamps = pa.array([-210866803200000000, INT64_MAX - 1, INT64_MAX, wrapped_max, 1], pa.int64())
    texts = wire_values(stamps.cast(pa.timestamp("us", "UTC")), "timestamptz", "t", None, read_instant)
    assert texts == ["4714-11-24T00:00:00.000000+00:00 BC", "294247-01-10T04:00:54.775806+00:00",
                     "294247-01-10T04:00:54.775807+00:00", "294276-12-31T23:59:59.999999+00:00",
                     "1970-01-01T00:00:00.000001+00:00"]
    decoded, _ = decode_rows([{"d": v} for v in wire_values(dates, "date", "d", None, read_instant)],
                          schema_of(d="date"))
    assert decoded.column("d").combine_chunks().view(pa.int32()).to_pylist() == [
        -2440588, -735160, -719163, 2932897, 2145042905, INT32_MAX, -(2**31), None]
    fits = [{"t": t} for t in texts[:2] + texts[4:] + ["infinity", "-infinity"]]
    decoded, _ = decode_rows(fits, schema_of(t="timestamptz"))
    assert decoded.column("t").combine_chunks().view(pa.int64()).to_pylist() == [
        -210866803200000000, INT64_MAX - 1, 1, INT64_MAX, INT64_MIN]


def test_timestamps_arrow_cannot_hold_fail_naming_stream_column_and_key():
    rows = [{"id": 1, "t": "2000-01-01T00:00:00.000000"}, {"id": 7, "t": "294276-12-31T23:59:59.999999"}]
    schema = {"properties": {"id": {"type": "integer", "x-olake-type": "int32"},
                             "t": {"type": ["null", "string"], "x-olake-type": "timestamp"}}}
    with pytest.raises(DestinationError, match=r"stream 'public.s', column 't', row with key id=7: "
                                               r"timestamp '294276-12-31T23:59:59.999999' lies beyond"):
        decode_rows(rows, schema, stream="public.s", key_columns=("id",))
    rows[1]["t"] = "294247-01-10T04:00:54.775807"  # int64 max: taken by +infinity
    with pytest.raises(DestinationError, match="column 't', row 2 of the batch"):
        decode_rows(rows, schema)
    batch = pa.record_batch({"id": pa.array([3, 9], pa.int32()), "t": pa.array(
        [0, 9223371331199999999 + PG_EPOCH_US - 2**64], pa.int64()).cast(pa.timestamp("us"))})
    with pytest.raises(DestinationError, match="stream 'x', column 't', row with key id=9"):
        to_destination(batch, schema, "x", ("id",), instant_wire_columns(batch, [("t", "timestamp")]))
    texts = pa.record_batch({"id": pa.array([3, 9], pa.int32()), "m": pa.array(['{{"2000-01-01 00:00:00"}}',
                                                                                '{{"294276-12-31 23:59:59.999999"}}'])})
    nested = {"properties": {"id": schema["properties"]["id"],
                             "m": {"type": ["null", "array"], "x-olake-type": "array<array<timestamp>>"}}}
    reader = PostgresChunkReader("n.s", 0, "", "postgresql://", None, key_columns=("id",),
                                 text_arrays=(("m", "array<array<timestamp>>", ","),))
    with pytest.raises(DestinationError, match="stream 'x', column 'm', row with key id=9: timestamp .* lies beyond"):
        to_destination(texts, nested, "x", ("id",), reader.wire_columns(texts))  # a source's own wire values


def test_the_chunk_reader_unwraps_the_drivers_dates_and_timestamps_as_wire_columns():
    """The chunk reader gives the wire values of its date and timestamp columns (arrays of them too) that
    hold a value the driver may have wrapped; a column within years 1..9999 goes through the codec as it is."""
    wrapped_max = 9223371331199999999 + PG_EPOCH_US - 2**64  # 294276-12-31T23:59:59.999999
    batch = pa.record_batch({
        "d": pa.array([-2147472692, 1], pa.int32()).cast(pa.date32()),
        "t": pa.array([wrapped_max, -9222425352054775808], pa.int64()).cast(pa.timestamp("us")),
        "a": pa.array([[-2147472691, 0], None], pa.list_(pa.int32())).cast(pa.list_(pa.date32())),
        "plain": pa.array([0, None], pa.int64()).cast(pa.timestamp("us", "UTC"))})
    reader = PostgresChunkReader("n.s", 0, "", "postgresql://", None, instant_columns=(
        ("d", "date"), ("t", "timestamp"), ("a", "array<date>"), ("plain", "timestamptz")))
    assert reader.wire_columns(batch) == {"d": ["infinity", "1970-01-02"],
                                          "t": ["294276-12-31T23:59:59.999999", "-infinity"],
                                          "a": [["-infinity", "1970-01-01"], None]}
    within = PostgresChunkReader("n.s", 0, "", "postgresql://", None, instant_columns=(("plain", "timestamptz"),))
    assert within.wire_columns(batch) is None


def test_nested_arrays_round_trip_and_bad_depth_names_the_row():
    """PostgreSQL's array text of a multi-dimensional column becomes nested lists in the chunk reader."""
    texts = pa.array(['{{1,2},{3,NULL}}', None, '{}', '{{{1}}}'])
    schema = {"properties": {"id": {"type": "integer", "x-olake-type": "int32"},
                             "m": {"type": ["null", "array"], "x-olake-type": "array<array<int32>>"}}}
    batch = pa.record_batch({"id": pa.array([1, 2, 3, 4], pa.int32()), "m": texts})
    reader = PostgresChunkReader("n.s", 0, "", "postgresql://", None, key_columns=("id",),
                                 text_arrays=(("m", "array<array<int32>>", ","),))
    with pytest.raises(SourceError, match=r"stream 'n.s', column 'm', row with key id=4: .*"
                                          "3-dimensional value in a column of 2 dimensions; .*run discover again"):
        reader.wire_columns(batch)
    batch = batch.slice(0, 3)
    wire = reader.wire_columns(batch)
    lines = encode_records(batch, schema, "s", "n", 1, wire_columns=wire)
    data = [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]
    table, _ = decode_rows(data, schema)
    assert [d["m"] for d in data] == [[[1, 2], [3, None]], None, []]
    assert table.column("m").to_pylist() == [[[1, 2], [3, None]], None, []]
    assert table.schema.field("m").type == arrow_type("array<array<int32>>")
    direct, _ = to_destination(batch, schema, wire_columns=wire)
    assert direct.column("m").equals(table.column("m"))


def test_ndarrays_keep_every_shape_and_bound_on_both_paths():
    """An ndarray column's array text becomes lower bounds, lengths and elements, the same through
    RECORD lines and straight to the destination; the wire value's shape must match its elements."""
    texts = pa.array(["[0:2]={1,NULL,3}", "{{1,2},{3,4}}", "{}", None, "[-2:-1][5:5]={{7},{8}}"])
    schema = {"properties": {"id": {"type": "integer", "x-olake-type": "int32"},
                             "m": {"type": ["null", "object"], "x-olake-type": "ndarray<int32>"}}}
    batch = pa.record_batch({"id": pa.array(range(5), pa.int32()), "m": texts})
    reader = PostgresChunkReader("n.s", 0, "", "postgresql://", None, text_arrays=(("m", "ndarray<int32>", ","),))
    wire = reader.wire_columns(batch)
    lines = encode_records(batch, schema, "s", "n", 1, wire_columns=wire)
    data = [orjson.loads(line)["record"]["data"]["m"] for line in lines.splitlines()]
    assert data == [{"lower_bounds": [0], "lengths": [3], "elements": [1, None, 3]},
                    {"lower_bounds": [1, 1], "lengths": [2, 2], "elements": [1, 2, 3, 4]},
                    {"lower_bounds": [], "lengths": [], "elements": []}, None,
                    {"lower_bounds": [-2, 5], "lengths": [2, 1], "elements": [7, 8]}]
    table, _ = decode_rows([{"id": i, "m": m} for i, m in enumerate(data)], schema)
    assert table.column("m").to_pylist() == data and table.schema.field("m").type == arrow_type("ndarray<int32>")
    direct, _ = to_destination(batch, schema, wire_columns=wire)
    assert direct.column("m").equals(table.column("m"))
    assert wire_values(table.column("m"), "ndarray<int32>", "m") == data  # and back from Arrow
    for bad in ({"lower_bounds": [0], "lengths": [2], "elements": [1]},
                {"lower_bounds": [0], "lengths": [0], "elements": []},
                {"lower_bounds": [0], "lengths": [1], "elements": [1], "extra": 1},
                {"lower_bounds": [2147483647], "lengths": [2], "elements": [1, 2]}):
        with pytest.raises(ProtocolError, match="column 'm"):
            decode_rows([{"id": 1, "m": bad}], schema)


@pytest.mark.parametrize("olake_type, value, type_name", [
    ("int64", "1", "str"), ("int32", True, "bool"), ("int16", 1.5, "float"),
    ("float64", True, "bool"), ("float64", [1.0], "list"), ("decimal(10,2)", 12.3, "float"),
    ("string", 5, "int"), ("timestamp", 0, "int"), ("interval", "P1D", "str"),
    ("array<int32>", 1, "int"), ("array<int32>", ["1"], "str"), ("bool", 0, "int"),
    ("json", {"a": 1}, "dict"), ("bytes", 5, "int"),
])
def test_wrong_wire_type_raises_protocol_error_naming_column_and_type(olake_type, value, type_name):
    with pytest.raises(ProtocolError, match=rf"column 'c(\[\])?'.*got {type_name}"):
        decode_rows([{"c": None}, {"c": value}], schema_of(c=olake_type))


@pytest.mark.parametrize("olake_type, value", [
    ("int16", 40000), ("int64", 2**63), ("float32", "nan"), ("decimal(4,2)", "123.45"),
    ("decimal(4,2)", "1.234"), ("uuid", "not-a-uuid"), ("bytes", "@@@"),
    ("timestamp", "2024-01-01T00:00:00+00:00"), ("timestamptz", "2024-01-01T00:00:00"),
    ("date", "2024-02-30"), ("time", "25:00:00"), ("time", "2024-01-01T00:00:00"),
    ("interval", {"months": 1, "days": 2}), ("interval", {"months": 1, "days": 2, "microseconds": True}),
    ("interval", {"months": 2**31, "days": 0, "microseconds": 0}),
])
def test_invalid_wire_values_raise_protocol_error(olake_type, value):
    with pytest.raises(ProtocolError, match="column 'c'"):
        decode_rows([{"c": value}], schema_of(c=olake_type))


def test_nan_in_decimal_becomes_null_with_one_warning():
    rows = [{"d": "NaN"}, {"d": "1.25"}, {"d": "NaN"}, {"a": [None, "NaN"]}]
    table, warnings = decode_rows(rows, schema_of(d="decimal(5,2)", a="array<decimal(5,2)>"))
    assert table.column("d").to_pylist() == [None, Decimal("1.25"), None, None]
    assert table.column("a").to_pylist() == [None, None, None, [None, None]]
    assert warnings == ["column 'd': 2 NaN value(s) stored as null in decimal(5,2)",
                        "column 'a[]': 1 NaN value(s) stored as null in decimal(5,2)"]


def test_missing_keys_are_null_extra_keys_ignored_and_not_null_enforced():
    json_schema = {"properties": {"id": {"type": "integer", "x-olake-type": "int64"},
                                  "v": {"type": ["null", "string"], "x-olake-type": "string"}}}
    table, _ = decode_rows([{"id": 1, "_olake_op": "d"}, {"id": 2, "v": "x"}], json_schema)
    assert table.to_pylist() == [{"id": 1, "v": None}, {"id": 2, "v": "x"}]
    assert table.schema.field("id").nullable is False
    with pytest.raises(ProtocolError, match="column 'id'.*non-nullable"):
        decode_rows([{"v": "x"}], json_schema)


def test_wire_time_and_float_strings_decode_exactly():
    rows = [{"t": "24:00:00", "f": "Infinity", "z": "2024-01-01T05:30:00.000001+05:30"},
            {"t": "00:00:00.5", "f": 1, "z": "2024-01-01T00:00:00Z"}]
    table, _ = decode_rows(rows, schema_of(t="time", f="float64", z="timestamptz"))
    assert table.column("t").cast(pa.int64()).to_pylist() == [86_400_000_000, 500_000]
    assert table.column("f").to_pylist() == [float("inf"), 1.0]
    assert table.column("z").cast(pa.int64()).to_pylist() == [1704067200000001, 1704067200000000]


def test_batch_column_must_be_in_the_schema():
    batch = pa.record_batch({"x": pa.array([1])})
    with pytest.raises(CatalogError, match="'x'"):
        encode_records(batch, schema_of(a="int64"), "s", None, 1)
    with pytest.raises(SourceError, match="column 'x'.*string"):
        encode_records(batch, schema_of(x="string"), "s", None, 1)


def test_data_that_is_not_an_object_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="JSON object"):
        decode_rows([{"a": 1}, [1]], schema_of(a="int64"))


def test_arrow_decimals_encode_as_plain_text_never_exponents():
    array = pa.array([Decimal("0E-10"), Decimal("1E-10"), Decimal("-12.5000000000"), None],
                     pa.decimal128(38, 10))
    assert wire_values(array, "decimal(38,10)", "d") == [
        "0.0000000000", "0.0000000001", "-12.5000000000", None]
    uuids = ["A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", None, str(U1)]
    table, _ = decode_rows([{"u": v} for v in uuids], schema_of(u="uuid"))
    assert table.column("u").to_pylist() == [U1, None, U1]
    with pytest.raises(ProtocolError, match="'c'.*canonical uuid"):
        decode_rows([{"c": "{" + str(U1) + "}"}], schema_of(c="uuid"))


@pytest.mark.parametrize("element", ["bool", "int32", "float64", "decimal(12,2)", "uuid", "bytes", "json", "date",
                                     "time", "timestamp", "timestamptz", "interval", "objectid", "string"])
def test_arrays_whose_rows_are_all_empty_or_null_decode(element):
    """A batch (a change batch of one row, say) whose arrays hold no element at all: the element
    checks run over nothing and pass."""
    schema = schema_of(a=f"array<{element}>")
    decoded, warnings = decode_rows([{"a": []}, {"a": None}, {}], schema)
    assert decoded.column("a").to_pylist() == [[], None, None] and warnings == []
