"""The MongoDB (BSON) type system against a real server: every BSON type is inferred, converted to
Arrow, carried through the JSON-lines wire and restored exactly."""

from __future__ import annotations

import math
import re
import struct
import uuid
from decimal import Decimal

import bson
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from bson import (
    Binary, Code, DatetimeMS, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp, json_util,
)
from bson.dbref import DBRef
from bson.raw_bson import RawBSONDocument
from pymongo.errors import OperationFailure

from olake_cli.core.codec.decode import decode_rows
from olake_cli.core.codec.scanned import _already_exact, to_destination
from olake_cli.core.codec.types import INT32_MAX, INT32_MIN, arrow_schema, arrow_type, field_arrow_type
from olake_cli.core.record_lines import encode_records
from olake_cli.core.errors import CatalogError, ProtocolError, SourceError
from olake_cli.sources.mongodb.bson_ejson import EJSON_OPTIONS
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS, infer_json_schema
from olake_cli.sources.mongodb.bson_types import documents_to_batch
from olake_cli.sources.mongodb.bson_wire import document_to_wire
from tests.support.mongo import connect

STREAM = "shop.items"
YEAR_1, YEAR_1900, YEAR_9999_END = -62_135_596_800_000, -2_208_988_800_000, 253_402_300_799_999
IDS = [ObjectId(f"65f0000000000000000000{n:02x}") for n in range(1, 5)]
UUIDS = [uuid.UUID(int=n * 0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF) for n in range(1, 4)]


def source_documents() -> list[dict]:
    """Documents holding every BSON type, consistent and inconsistent shapes, nulls and gaps."""
    base = [
        {"_id": IDS[0], "oid": ObjectId("0123456789abcdef01234567"), "dec": Decimal128("NaN"),
         "i32": INT32_MIN, "i64": Int64(2**53 + 1), "int_long": 7, "dbl": float("nan"),
         "dt": DatetimeMS(YEAR_1), "bin0": b"\x00\xff", "uid": UUIDS[0], "bin_other": Binary(b"md5!", 5),
         "ts": Timestamp(1_700_000_000, 7), "re": Regex("^a.b$", "imx"), "edge": MinKey(),
         "code": Code("function () { return x; }"), "num_mix": 1, "maybe": "here", "only_null": None,
         "a.b": 1, "$price": Decimal128("1.10"),
         "addr": {"street": "Main", "geo": {"lat": 1.5, "lng": -0.0}, "x.y": 1, "$z": Int64(2)},
         "shape": {"a": 1}, "ints": [1, 2, 3], "mixed_arr": [1, "one"], "empty_arr": [],
         "lines": [{"sku": "A", "qty": 1, "when": DatetimeMS(0)},
                   {"sku": "B", "qty": None, "when": None}],
         "grid": [[1, 2], [3]], "uuids": [UUIDS[1], None],
         "dates": [DatetimeMS(-1), DatetimeMS(YEAR_9999_END)],
         "oids": [IDS[1]], "decs": [Decimal128("-0"), Decimal128("1E+6144")],
         "dbls": [float("inf"), float("-inf"), -0.0, 5e-324],
         "meta": {"when": Timestamp(1, 2), "n": 1, "uid": UUIDS[0]},
         "ref": DBRef("other", IDS[2]), "flag": True,
         "num_exact": Int64(2**60), "num_wide": Int64(2**53 + 1), "num_dec": 1},
        {"_id": IDS[1], "oid": ObjectId("fedcba9876543210fedcba98"), "dec": Decimal128("-Infinity"),
         "i32": INT32_MAX, "i64": Int64(-(2**63)), "int_long": Int64(2**62), "dbl": float("inf"),
         "dt": DatetimeMS(YEAR_9999_END), "bin0": b"", "uid": UUIDS[2],
         "bin_other": Binary(b"\x01", 128),
         "ts": Timestamp(0, 0), "re": Regex("x", 0), "edge": MaxKey(),
         "code": Code("function () { return y; }", {"y": 1}), "num_mix": 1.5, "maybe": None,
         "only_null": None, "a.b": 2, "$price": Decimal128("-0"),
         "addr": {"street": "Side", "geo": {"lat": float("nan"), "lng": 2.0}, "x.y": None,
                  "$z": Int64(3)},
         "shape": {"b": 2}, "ints": [], "mixed_arr": [{"a": 1}, [2]], "empty_arr": [],
         "lines": [], "grid": [[], [4, 5, 6]], "uuids": [], "dates": [], "oids": [], "decs": [],
         "dbls": [], "meta": {"when": Timestamp(3, 4), "n": 2, "uid": None},
         "ref": DBRef("other", 1), "flag": False,
         "num_exact": 2.5, "num_wide": 0.5, "num_dec": Decimal128("2.5")},
        {"_id": IDS[2], "oid": ObjectId("000000000000000000000000"), "dec": Decimal128("1E+6144"),
         "i32": 0, "i64": Int64(2**63 - 1), "int_long": 3, "dbl": -0.0, "dt": DatetimeMS(YEAR_1900),
         "bin0": b"bytes", "uid": None, "bin_other": None, "ts": None, "re": None, "edge": None,
         "code": None, "num_mix": None, "a.b": None, "$price": None, "addr": None, "shape": None,
         "ints": None, "mixed_arr": None, "empty_arr": [], "lines": None, "grid": None, "uuids": None,
         "dates": None, "oids": None, "decs": None, "dbls": None, "meta": None, "ref": None,
         "flag": None},
        {"_id": IDS[3], "dec": Decimal128("-0"), "i32": -1, "i64": Int64(0), "int_long": 9,
         "dbl": float("-inf"), "dt": DatetimeMS(-1), "num_mix": 2, "num_wide": float("nan"), "num_dec": 0.1},
    ]
    return base


EXPECTED_TYPES = {
    "_id": "objectid", "oid": "objectid", "dec": "decimal128", "i32": "int32", "i64": "int64",
    "int_long": "int64", "dbl": "float64", "dt": "datetime_ms", "bin0": "bytes", "uid": "uuid",
    "bin_other": "bson", "ts": "bson", "re": "bson", "edge": "bson", "code": "bson", "num_mix": "float64",
    "maybe": "string", "only_null": "bson", "a.b": "int32", "$price": "decimal128", "addr": "document",
    "shape": "bson", "ints": "array<int32>", "mixed_arr": "bson", "empty_arr": "bson",
    "lines": "array<document>", "grid": "array<array<int32>>", "uuids": "array<uuid>",
    "dates": "array<datetime_ms>", "oids": "array<objectid>", "decs": "array<decimal128>",
    "dbls": "array<float64>", "meta": "document", "ref": "bson", "flag": "bool",
    "num_exact": "float64", "num_wide": "decimal128", "num_dec": "decimal128",
}


@pytest.fixture()
def collection_docs(mongo_server, mongo_db) -> list[dict]:
    """The source documents inserted into a real collection, then read back exactly."""
    with connect(mongo_server.uri) as client:
        collection = client[mongo_db]["items"]
        collection.insert_many(source_documents())
        return list(collection.find().sort("_id", 1))


@pytest.fixture()
def typed(collection_docs) -> tuple[list[dict], dict, pa.RecordBatch]:
    schema = infer_json_schema(collection_docs)
    return collection_docs, schema, documents_to_batch(collection_docs, schema, STREAM)


# ----------------------------------------------------------------------------- exact comparison


def exact_values(array: pa.Array | pa.ChunkedArray) -> list:
    """An array's values in a form where equal means identical (float bits, timestamp integers)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    type_ = array.type
    if isinstance(type_, pa.JsonType):
        return array.storage.to_pylist()
    if pa.types.is_timestamp(type_):
        return array.view(pa.int64()).to_pylist()
    if pa.types.is_floating(type_):
        return [None if v is None else struct.pack("<d", v) for v in array.to_pylist()]
    if pa.types.is_struct(type_):
        children = {field.name: exact_values(child) for field, child in zip(type_, array.flatten())}
        return [None if not valid else {name: values[row] for name, values in children.items()}
                for row, valid in enumerate(array.is_valid().to_pylist())]
    if pa.types.is_list(type_):
        flat, position, result = exact_values(array.flatten()), 0, []
        for length in pc.list_value_length(array).to_pylist():
            result.append(None if length is None else flat[position:position + length])
            position += length or 0
        return result
    return array.to_pylist()


def assert_identical(left: pa.RecordBatch | pa.Table, right: pa.RecordBatch | pa.Table) -> None:
    assert [(f.name, f.type) for f in left.schema] == [(f.name, f.type) for f in right.schema]
    for name in left.schema.names:
        assert exact_values(left.column(name)) == exact_values(right.column(name)), name


def assert_matches_source(arrow_value, source, prop: dict, where: str) -> None:
    """One Arrow value (from ``exact_values``) equals the BSON value it came from, exactly."""
    olake_type = prop["x-olake-type"]
    if source is None:
        assert arrow_value is None, where
    elif olake_type == "bson":
        back = json_util.loads(arrow_value, json_options=EJSON_OPTIONS)
        assert bson.encode({"v": back}, codec_options=BSON_CODEC_OPTIONS) == \
            bson.encode({"v": source}, codec_options=BSON_CODEC_OPTIONS), where
    elif olake_type == "document":
        assert set(arrow_value) == set(prop["properties"]), where
        for name, sub in prop["properties"].items():
            assert_matches_source(arrow_value[name], source.get(name), sub, f"{where}.{name}")
    elif olake_type.startswith("array<"):
        assert len(arrow_value) == len(source), where
        element = {**prop["items"], "x-olake-type": olake_type[6:-1]}
        for index, (value, item) in enumerate(zip(arrow_value, source)):
            assert_matches_source(value, item, element, f"{where}[{index}]")
    else:
        assert arrow_value == scalar_expected(source, olake_type), where


def scalar_expected(source, olake_type: str):
    """What a scalar BSON value must be in Arrow, computed independently of the module under test."""
    if olake_type == "objectid":
        return source.binary.hex()
    if olake_type == "decimal128":  # a double: the shortest text that reads back as it
        return str(Decimal(repr(source))) if isinstance(source, float) and math.isfinite(source) else \
            {"nan": "NaN"}.get(str(source), str(source))
    if olake_type == "datetime_ms":
        return int(source)
    if olake_type == "float64":
        return struct.pack("<d", source)
    if olake_type == "uuid":
        return source if isinstance(source, uuid.UUID) else uuid.UUID(bytes=bytes(source))
    if olake_type in ("int32", "int64"):
        assert isinstance(source, int) and not isinstance(source, bool)
        return int(source)
    return source


def json_lines_round_trip(batch: pa.RecordBatch, schema: dict) -> pa.Table:
    lines = encode_records(batch, schema, "items", "shop", 0, key_columns=("_id",))
    rows = [orjson.loads(line)["record"]["data"] for line in lines.splitlines()]
    table, warnings = decode_rows(rows, schema, stream=STREAM, key_columns=("_id",))
    assert warnings == []
    return table


# ----------------------------------------------------------------------------- tests


def test_schema_is_inferred_from_the_bson_types_of_the_collection(collection_docs):
    schema = infer_json_schema(collection_docs)
    properties = schema["properties"]
    assert list(properties)[0] == "_id" and properties["_id"]["type"] == ["string"]
    assert {name: prop["x-olake-type"] for name, prop in properties.items()} == EXPECTED_TYPES
    assert all("null" in prop["type"] for name, prop in properties.items() if name != "_id")
    bson_types = {name: prop["x-olake-bson-types"] for name, prop in properties.items()}
    assert bson_types["int_long"] == ["int", "long"]
    assert bson_types["num_mix"] == ["double", "int", "null"]
    assert bson_types["maybe"] == ["null", "string"] and bson_types["only_null"] == ["null"]
    assert bson_types["uid"] == ["binData:4", "null"]
    assert bson_types["bin_other"] == ["binData:128", "binData:5", "null"]
    assert bson_types["code"] == ["javascript", "javascriptWithScope", "null"]
    assert bson_types["edge"] == ["maxKey", "minKey", "null"]
    addr = properties["addr"]["properties"]
    assert list(addr) == ["street", "geo", "x.y", "$z"]
    assert addr["geo"]["x-olake-type"] == "document"
    assert {k: v["x-olake-type"] for k, v in addr["geo"]["properties"].items()} == {
        "lat": "float64", "lng": "float64"}
    assert addr["$z"]["x-olake-type"] == "int64" and addr["x.y"]["x-olake-bson-types"] == ["int", "null"]
    lines = properties["lines"]["items"]
    assert lines["x-olake-type"] == "document"
    assert {k: v["x-olake-type"] for k, v in lines["properties"].items()} == {
        "sku": "string", "qty": "int32", "when": "datetime_ms"}
    assert properties["grid"]["items"]["items"]["x-olake-type"] == "int32"
    assert properties["meta"]["properties"]["when"]["x-olake-type"] == "bson"
    raw = [RawBSONDocument(bson.encode(d, codec_options=BSON_CODEC_OPTIONS)) for d in source_documents()]
    assert infer_json_schema(raw) == schema


def test_arrow_values_equal_the_source_values_one_by_one(typed):
    docs, schema, batch = typed
    assert batch.schema == arrow_schema(schema)
    assert batch.schema.field("addr").type == field_arrow_type(schema["properties"]["addr"])
    for name, prop in schema["properties"].items():
        values = exact_values(batch.column(name))
        for row, doc in enumerate(docs):
            assert_matches_source(values[row], doc.get(name), prop, f"{name} of {doc['_id']}")
    decs = exact_values(batch.column("dec"))
    assert decs == ["NaN", "-Infinity", "1.000000000000000000000000000000000E+6144", "-0"]
    assert exact_values(batch.column("dt")) == [YEAR_1, YEAR_9999_END, YEAR_1900, -1]
    assert exact_values(batch.column("i64"))[:3] == [2**53 + 1, -(2**63), 2**63 - 1]
    assert batch.column("dbl").to_pylist()[2] == 0.0 and str(batch.column("dbl")[2].as_py()) == "-0.0"
    ts = json_util.loads(batch.column("ts")[0].as_py())
    assert ts == Timestamp(1_700_000_000, 7) and batch.column("ts")[0].as_py() == \
        json_util.dumps(Timestamp(1_700_000_000, 7), json_options=json_util.CANONICAL_JSON_OPTIONS)


def test_json_lines_round_trip_restores_the_batch_exactly(typed):
    docs, schema, batch = typed
    assert_identical(json_lines_round_trip(batch, schema), batch)


def test_to_destination_takes_the_batch_as_already_exact(typed, tmp_path):
    docs, schema, batch = typed
    table, warnings = to_destination(batch, schema, stream=STREAM, key_columns=("_id",))
    assert warnings == []
    assert_identical(table, batch)
    for field in arrow_schema(schema):
        prop = schema["properties"][field.name]
        column = batch.column(field.name)
        assert _already_exact(column, prop["x-olake-type"], field.type, prop) is not None, field.name
    pq.write_table(table, tmp_path / "items.parquet")
    assert_identical(pq.read_table(tmp_path / "items.parquet"), table)


def test_to_destination_converts_a_batch_of_other_arrow_types_to_the_same_table(typed):
    docs, schema, batch = typed
    loose = {name: column for name, column in zip(batch.schema.names, batch.columns)}
    for name in ("addr", "meta", "lines"):  # struct fields in another order: not the destination type
        column = batch.column(name)
        struct = column if name != "lines" else column.flatten()
        fields = list(reversed(list(struct.type)))
        shuffled = pa.StructArray.from_arrays([struct.field(f.name) for f in fields], fields=fields,
                                              mask=struct.is_null())
        loose[name] = shuffled if name != "lines" else pa.ListArray.from_arrays(
            column.offsets, shuffled, mask=column.is_null())
    table, _ = to_destination(pa.RecordBatch.from_pydict(loose), schema, stream=STREAM)
    assert_identical(table, batch)


def test_document_to_wire_agrees_with_encode_records(typed):
    docs, schema, batch = typed
    lines = encode_records(batch, schema, "items", "shop", 0).splitlines()
    for doc, line in zip(docs, lines, strict=True):
        wire = document_to_wire(doc, schema, STREAM)
        assert orjson.dumps(wire) == orjson.dumps(orjson.loads(line)["record"]["data"])
        single = encode_records(documents_to_batch([doc], schema, STREAM), schema, "items", "shop", 0)
        assert single == line + b"\n"


def test_int32_widens_into_int64_and_bson_takes_any_value(typed):
    docs, schema, _ = typed
    doc = {**docs[0], "i64": 5, "re": Timestamp(9, 9), "shape": [MinKey(), {"deep": Int64(1)}]}
    batch = documents_to_batch([doc], schema, STREAM)
    assert batch.column("i64").to_pylist() == [5]
    assert json_util.loads(batch.column("shape")[0].as_py()) == [MinKey(), {"deep": Int64(1)}]
    assert document_to_wire(doc, schema, STREAM)["i64"] == 5


@pytest.mark.parametrize("field, value, named", [
    ("i32", Int64(5), "'i32'"), ("i32", 2**31, "'i32'"), ("dbl", Int64(2**53 + 1), "'dbl'"), ("dec", "1.5", "'dec'"),
    ("addr", "Main street", "'addr'"), ("uid", Binary(b"short", 4), "'uid'"),
    ("bin0", Binary(b"x", 5), "'bin0'"),
    ("ints", [1, Int64(2)], "'ints[]'"), ("lines", [{"sku": 1}], "'lines[].sku'"),
    ("addr", {"street": "x", "zip": "1"}, "'addr.zip'"), ("extra", 1, "'extra'"),
    ("_id", None, "'_id'"), ("oid", str(IDS[0]), "'oid'"), ("dt", 5, "'dt'"),
])
def test_a_value_that_does_not_fit_names_stream_field_and_id(typed, field, value, named):
    docs, schema, _ = typed
    doc = {**docs[1], field: value}
    messages = []
    for convert in (documents_to_batch, document_to_wire):
        with pytest.raises(SourceError) as caught:
            convert([docs[0], doc] if convert is documents_to_batch else doc, schema, STREAM)
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert f"stream '{STREAM}'" in messages[0] and f"column {named}" in messages[0]
    assert f"_id={doc['_id']!r}" in messages[0]
    assert "run discover again" in messages[0] and "bson" in messages[0]


def test_ejson_type_markers_as_field_names_cannot_pass_as_bson(typed):
    docs, schema, _ = typed
    doc = {**docs[0], "shape": {"$date": 5}}
    with pytest.raises(SourceError, match=r"column 'shape'.*type markers"):
        documents_to_batch([doc], schema, STREAM)
    fine = {**docs[0], "shape": {"$weird": 5, "n": [{"$also": 1}]}}
    text = documents_to_batch([fine], schema, STREAM).column("shape")[0].as_py()
    assert json_util.loads(text) == {"$weird": 5, "n": [{"$also": 1}]}


def test_datetimes_at_the_bson_extremes(mongo_server, mongo_db):
    """Every BSON date (int64 milliseconds) is carried; a server that refuses dates beyond Python's
    years 1..9999 (SecantusDB decodes with datetime) is bypassed through raw BSON instead."""
    extremes = [-(2**63), -(2**62), YEAR_1 - 1, YEAR_9999_END + 1, 2**62, 2**63 - 1]
    docs = [{"_id": n, "at": DatetimeMS(ms), "list": [DatetimeMS(ms)], "doc": {"at": DatetimeMS(ms)}}
            for n, ms in enumerate(extremes)]
    try:
        with connect(mongo_server.uri) as client:
            client[mongo_db]["dates"].insert_many(docs)
            read = list(client[mongo_db]["dates"].find().sort("_id", 1))
    except OperationFailure:
        if mongo_server.real_mongod:
            raise
        raw = [bson.encode(d, codec_options=BSON_CODEC_OPTIONS) for d in docs]
        read = [bson.decode(b, codec_options=BSON_CODEC_OPTIONS) for b in raw]
    schema = infer_json_schema(read)
    assert schema["properties"]["at"]["x-olake-type"] == "datetime_ms"
    assert schema["properties"]["_id"]["x-olake-type"] == "int32"
    batch = documents_to_batch(read, schema, STREAM)
    assert exact_values(batch.column("at")) == extremes
    assert [row[0] for row in exact_values(batch.column("list"))] == extremes
    assert [row["at"] for row in exact_values(batch.column("doc"))] == extremes
    assert_identical(json_lines_round_trip(batch, schema), batch)
    assert [document_to_wire(d, schema, STREAM)["at"] for d in read] == extremes


def test_codec_types_and_wire_checks_of_the_bson_types():
    assert arrow_type("objectid") == pa.string() and arrow_type("decimal128") == pa.string()
    assert arrow_type("datetime_ms") == pa.timestamp("ms", tz="UTC") and arrow_type("bson") == pa.json_()
    assert arrow_type("array<datetime_ms>") == pa.list_(pa.timestamp("ms", tz="UTC"))
    with pytest.raises(CatalogError, match="field_arrow_type"):
        arrow_type("document")
    with pytest.raises(CatalogError, match="properties"):
        field_arrow_type({"x-olake-type": "document", "properties": {}}, "d")
    int32 = {"type": ["integer", "null"], "x-olake-type": "int32"}
    schema = {"properties": {"o": {"type": ["string", "null"], "x-olake-type": "objectid"},
                             "d": {"type": ["object", "null"], "x-olake-type": "document",
                                   "properties": {"a": int32}}}}
    with pytest.raises(ProtocolError, match="24 lowercase hex"):
        decode_rows([{"o": "0123456789ABCDEF01234567"}], schema)
    with pytest.raises(ProtocolError, match=re.escape("'b' is not a field")):
        decode_rows([{"d": {"a": 1, "b": 2}}], schema)
    table, _ = decode_rows([{"o": None, "d": {}}, {"d": None}], schema)
    assert table.column("d").to_pylist() == [{"a": None}, None]
