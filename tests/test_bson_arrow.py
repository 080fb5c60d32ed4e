"""The columnar BSON decoder (``bson_arrow.raw_batch``) against the document-by-document converter
(``bson_types.documents_to_batch``): for every BSON type, shape and misfit the tests use, it gives
the same batch value for value, or declines (None) so that the converter decides."""

from __future__ import annotations

import math
import random
import uuid
from decimal import Decimal

import bson
import pyarrow as pa
import pytest
from bson import Binary, Code, DatetimeMS, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp

from olake_cli.core.errors import SourceError
from olake_cli.sources.mongodb.bson_arrow import raw_batch
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS, infer_json_schema
from olake_cli.sources.mongodb.bson_types import documents_to_batch
from tests.test_bson_types import source_documents

STREAM = "db.c"


def _raw(documents: list[dict]) -> bytes:
    return b"".join(bson.encode(d, codec_options=BSON_CODEC_OPTIONS) for d in documents)


def _decoded(data: bytes) -> list[dict]:
    return bson.decode_all(data, codec_options=BSON_CODEC_OPTIONS)


def _same(fast: pa.RecordBatch, slow: pa.RecordBatch) -> None:
    """Equal schemas and equal values, NaN and -0.0 included (``repr`` tells them apart)."""
    assert fast.schema == slow.schema
    for name in slow.schema.names:
        try:
            assert repr(fast.column(name).to_pylist()) == repr(slow.column(name).to_pylist()), name
        except OverflowError:  # a date beyond Python's years: Arrow compares it (no NaN in these)
            assert fast.column(name).equals(slow.column(name)), name


def _both(documents: list[dict], schema: dict | None = None) -> pa.RecordBatch | None:
    """The fast batch, checked against the converter's; None when the fast path declined."""
    data = _raw(documents)
    schema = schema or infer_json_schema(_decoded(data))
    fast = raw_batch(data, schema)
    if fast is not None:
        _same(fast, documents_to_batch(_decoded(data), schema, STREAM))
    return fast


def _shop(i: int) -> dict:
    """A document of the benchmark's shape (bench/bench_mongo.py)."""
    return {"_id": ObjectId(), "order_no": f"ORD-{i:09d}", "qty": i % 1000, "seq": Int64(i * 1_000_003),
            "price": (i % 100_000) / 7.0, "total": Decimal128(Decimal(i % 10_000_000) / 100),
            "created_at": DatetimeMS(i * 7_000), "address": {"street": f"{i} Main", "city": "Oslo", "zip": "0150"},
            "tags": ["new", "vip"][: i % 3], "active": i % 3 != 0, "uid": uuid.UUID(int=i), "blob": bytes([i % 256]) * (i % 4)}


def test_regular_documents_decode_columnar_and_exactly():
    docs = [_shop(i) for i in range(500)]
    assert _both(docs) is not None


def test_every_source_document_type_alone_decodes_exactly_or_declines():
    """Each field of the type tests' documents on its own (with ``_id``), typed as discovery types it."""
    docs = source_documents()
    names = {name for doc in docs for name in doc} - {"_id"}
    carried = set()
    for name in sorted(names):
        subset = [{"_id": d["_id"], name: d[name]} if name in d else {"_id": d["_id"]} for d in docs]
        if _both(subset) is not None:
            carried.add(name)
    # every type the walk is meant to take, at the top level, nested and in arrays
    assert {"oid", "dec", "i32", "i64", "int_long", "dbl", "dt", "bin0", "uid", "maybe", "addr", "ints",
            "lines", "grid", "uuids", "dates", "oids", "decs", "dbls", "flag", "num_exact", "num_wide",
            "num_dec", "bin_other", "ts", "edge", "code", "only_null", "shape", "ref", "mixed_arr"} <= carried


def test_whole_source_documents_decode_exactly_or_decline():
    _both(source_documents())


@pytest.mark.parametrize("text", [
    "0", "-0", "0.00", "-0.000001", "1.10", "123456789.123456789", "0.000001", "0.0000001", "1E+3", "1E-7",
    "-12345678901234567890.5", "18446744073709551615", "18446744073709551616", "9.999999999999999999999999999999999E+6144",
    "NaN", "-NaN", "Infinity", "-Infinity", "1E-6176", "-5E-6", "12.3E-10", "100", "1.000000000000000000000000000000000",
])
def test_decimal128_text_matches_str(text):
    value = Decimal128(text)
    schema = {"type": "object", "properties": {
        "_id": {"type": ["integer"], "x-olake-type": "int32"},
        "d": {"type": ["string", "null"], "x-olake-type": "decimal128"}}}
    fast = _both([{"_id": 1, "d": value}, {"_id": 2, "d": None}, {"_id": 3}], schema)
    assert fast is not None and fast.column("d").to_pylist() == [str(value), None, None]


def test_random_decimals_and_numbers_in_a_decimal_column():
    rng = random.Random(7)
    values = []
    for _ in range(2000):
        kind = rng.randrange(4)
        if kind == 0:
            values.append(Decimal128(Decimal(rng.randrange(-10**20, 10**20)).scaleb(-rng.randrange(0, 30))))
        elif kind == 1:
            values.append(Int64(rng.randrange(-2**63, 2**63)))
        elif kind == 2:
            values.append(rng.randrange(-2**31, 2**31))
        else:
            values.append(rng.uniform(-1e6, 1e6))
    schema = {"type": "object", "properties": {
        "_id": {"type": ["integer"], "x-olake-type": "int32"},
        "d": {"type": ["string", "null"], "x-olake-type": "decimal128"}}}
    assert _both([{"_id": i, "d": v} for i, v in enumerate(values)], schema) is not None


def test_gaps_nulls_and_undefined_are_nulls():
    docs = [_shop(i) for i in range(6)]
    del docs[1]["qty"], docs[2]["address"]["city"], docs[3]["tags"]
    docs[4]["price"] = None
    docs[5]["address"] = None
    assert _both(docs, infer_json_schema(docs)) is not None
    undefined = b"\x06qty\x00"
    document = bson.encode({"_id": 1})  # BSON undefined, which pymongo cannot encode: by hand
    handmade = (len(document) + len(undefined)).to_bytes(4, "little") + document[4:-1] + undefined + b"\x00"
    id_schema = {"type": "object", "properties": {"_id": {"type": ["integer"], "x-olake-type": "int32"},
                                                  "qty": {"type": ["integer", "null"], "x-olake-type": "int32"}}}
    fast = raw_batch(handmade, id_schema)
    assert fast is not None and fast.to_pylist() == documents_to_batch(_decoded(handmade), id_schema, STREAM).to_pylist()


@pytest.mark.parametrize("field, value", [
    ("qty", Int64(5)), ("qty", 2.0), ("qty", True), ("qty", "5"), ("seq", 1.0), ("seq", Decimal128("1")),
    ("price", Int64(2**53 + 1)), ("price", Decimal128("1.5")), ("price", "x"), ("order_no", bson.code.Code("x")),
    ("created_at", Timestamp(1, 1)), ("uid", Binary(b"x" * 16, 3)), ("uid", Binary(b"x" * 15, 4)),
    ("blob", Binary(b"x", 5)), ("active", 1), ("address", "Main"), ("address", {"street": "x", "extra": 1}),
    ("tags", "new"), ("tags", ["a", 1]), ("tags", [None, Regex("x")]), ("total", "1.5"), ("_id", None),
    ("extra", 1), ("order_no", Regex("x")), ("_id", MinKey()),
])
def test_a_value_outside_its_type_declines(field, value):
    """The converter then names the misfit (or drift widens the stream): the fast path never decides."""
    docs = [_shop(i) for i in range(3)]
    schema = infer_json_schema(docs)
    docs[1][field] = value
    data = _raw(docs)
    assert raw_batch(data, schema) is None
    with pytest.raises((SourceError, bson.errors.InvalidBSON)):  # a 15-byte UUID does not even decode
        documents_to_batch(_decoded(data), schema, STREAM)


def test_fields_in_another_order_decline_and_convert_exactly():
    docs = [_shop(i) for i in range(3)]
    schema = infer_json_schema(docs)
    docs[2] = dict(reversed(list(docs[2].items())))
    data = _raw(docs)
    assert raw_batch(data, schema) is None
    documents_to_batch(_decoded(data), schema, STREAM)  # the converter takes any order


def test_special_values_at_every_level():
    docs = [{"_id": i, "f": f, "fs": [f, None, f], "d": {"f": f}, "when": DatetimeMS(ms), "s": s}
            for i, (f, ms, s) in enumerate([
                (math.nan, -62_135_596_800_001, ""), (-0.0, 2**62, "é \u0000 x"), (math.inf, -(2**63), "\U0001F600"),
                (5e-324, 0, "a" * 10_000), (-math.inf, 253_402_300_800_000, "")])]
    assert _both(docs) is not None


def test_any_value_in_a_bson_field_is_extended_json():
    values = [Timestamp(1, 2), Regex("^a", "i"), MinKey(), MaxKey(), Code("f()", {"x": 1}), Binary(b"\x01", 128),
              {"a": [1, {"b": Int64(2)}]}, [1, "x"], None, Decimal128("NaN"), bson.dbref.DBRef("c", 1)]
    docs = [{"_id": i, "v": v} for i, v in enumerate(values)]
    schema = infer_json_schema(docs)
    assert schema["properties"]["v"]["x-olake-type"] == "bson"
    # a regex is sized only by scanning for its ends: the walk declines it, the converter carries it
    assert _both(docs, schema) is None
    assert _both([d for d in docs if not isinstance(d["v"], Regex)], schema) is not None


def test_empty_batch_and_empty_documents():
    schema = {"type": "object", "properties": {"_id": {"type": ["integer"], "x-olake-type": "int32"},
                                               "a": {"type": ["integer", "null"], "x-olake-type": "int32"}}}
    assert raw_batch(b"", schema).num_rows == 0
    assert _both([{"_id": 1}, {"_id": 2, "a": 3}], schema).to_pylist() == [{"_id": 1, "a": None}, {"_id": 2, "a": 3}]


# ----------------------------------------------------------------------------- change events


def _runs_both_ways(stream, pending):
    """(decoded_run's run, the document-by-document run) of the same queued changes."""
    from olake_cli.core.change_runs import Change, runs_of_changes
    from olake_cli.sources.mongodb.bson_wire import document_to_wire
    from olake_cli.sources.mongodb.change_decode import decoded_run

    schema = stream.json_schema
    key_schema = {"type": "object", "properties": {"_id": schema["properties"]["_id"]}}
    changes = []
    for p in pending:
        data = document_to_wire(_decoded(p.document)[0], key_schema if p.op == "d" else schema, STREAM)
        data.update(_olake_op=p.op, _olake_op_id=[p.op_id.commit, p.op_id.seq], _olake_commit_ts=p.commit_ts)
        changes.append(Change(stream.key, p.op_id, data))
    return decoded_run(stream, pending), runs_of_changes(changes)


@pytest.mark.parametrize("first", ["c", "d"])
def test_a_stretch_of_changes_decodes_into_the_converters_run(first):
    """The same fields, in the same order, with the same values (JSON texts read back), a delete's
    fields other than ``_id`` left out; the metadata columns equal."""
    import orjson

    from olake_cli.core.catalog import CatalogStream
    from olake_cli.core.opid import OpId
    from olake_cli.sources.mongodb.change_decode import PendingChange, decoded_run
    from tests.support.change_tables import assert_typed_run_decodes_alike

    docs = [_shop(i) for i in range(40)] + [{"_id": ObjectId(), "order_no": None}]
    docs[3]["price"] = math.nan
    stream = CatalogStream.from_dict({"name": "c", "namespace": "db", "json_schema": infer_json_schema(docs)})
    ops = [first] + ["c", "u", "d"] * 13 + ["u"]
    pending = [PendingChange(op, _raw([{"_id": d["_id"]} if op == "d" else d]), OpId(100 + i // 3, 1 + i % 3),
                             1_700_000_000_000_000 + i) for i, (op, d) in enumerate(zip(ops, docs))]
    fast, (slow,) = _runs_both_ways(stream, pending)
    assert fast is not None
    assert list(fast.data) == list(slow.data)
    for name in slow.data:
        def values(texts):
            return [None if t is None else repr(orjson.loads(t)) for t in texts.to_pylist()]
        assert values(fast.data[name]) == values(slow.data[name]), name
    for column in ("op", "commit", "seq", "commit_ts"):
        assert getattr(fast, column).equals(getattr(slow, column)), column
    typed = decoded_run(stream, pending, typed=True)  # sync's form: the decoded columns as they are
    assert_typed_run_decodes_alike(typed, fast, stream.json_schema)


def test_a_stretch_with_a_misfit_is_left_to_the_converter():
    from olake_cli.core.catalog import CatalogStream
    from olake_cli.core.opid import OpId
    from olake_cli.sources.mongodb.change_decode import PendingChange, decoded_run

    docs = [_shop(i) for i in range(3)]
    stream = CatalogStream.from_dict({"name": "c", "namespace": "db", "json_schema": infer_json_schema(docs)})
    docs[1]["qty"] = Int64(2**40)  # drift: int32 to int64, which the converter reports and widens
    pending = [PendingChange("c", _raw([d]), OpId(1, i + 1), 0) for i, d in enumerate(docs)]
    assert decoded_run(stream, pending) is None
