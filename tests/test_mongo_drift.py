"""The one rule of MongoDB schema drift (sources/mongodb/drift.py) and its record (core/schema_drift.py):
numbers promote without losing a value, anything else becomes bson, new fields become new columns;
in-place changes go on, replaced types reload; later runs keep what a run widened."""

from __future__ import annotations

import pytest
from bson import Decimal128, Int64, MinKey, ObjectId, Timestamp

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import SourceError
from olake_cli.core.schema_drift import DRIFT, apply_recorded, explained, needs_reload, widened
from olake_cli.core.state import StreamState
from olake_cli.sources.mongodb.bson_schema import infer_json_schema
from olake_cli.sources.mongodb.bson_types import documents_to_batch
from olake_cli.sources.mongodb.drift import widen, widened_schema

SAMPLE = [{"_id": ObjectId(), "i32": 1, "i64": Int64(2), "f": 1.5, "dec": Decimal128("1"), "s": "x",
           "doc": {"a": 1, "b": "y"}, "arr": [1, 2], "docs": [{"k": 1}]}]


def _schema() -> dict:
    return infer_json_schema(SAMPLE)


def _type(prop: dict) -> str:
    return prop["x-olake-type"]


@pytest.mark.parametrize("field, value, expected", [
    ("i32", Int64(5), "int64"),                      # in place
    ("i32", 2**40, "int64"),                         # a plain int beyond 32 bits is a long
    ("i32", 0.5, "float64"),                         # every int32 is a double
    ("i64", 0.5, "float64"),                         # the reload checks every earlier long again
    ("f", Int64(2**53 + 1), "decimal128"),           # not a double: never a lossy one
    ("f", Int64(2**60), "float64"),                  # exactly a double: fits as it is
    ("f", 3, "float64"),
    ("i32", Decimal128("2.5"), "decimal128"),
    ("dec", 0.1, "decimal128"), ("dec", Int64(2**63 - 1), "decimal128"),
    ("s", 5, "bson"), ("i32", "five", "bson"), ("i32", True, "bson"), ("f", Timestamp(1, 1), "bson"),
    ("doc", "flat", "bson"), ("doc", {"a": 1, "c": 2}, "bson"),  # a key the document never had
    ("arr", "flat", "bson"), ("arr", [1, "two"], "bson"), ("arr", [1, 0.5], "array<float64>"),
    ("arr", [None, Int64(3)], "array<int64>"), ("_id", None, "bson"), ("_id", 7, "bson"),
])
def test_a_value_outside_its_type_widens_the_field_by_the_rule(field, value, expected):
    schema = _schema()
    prop = widen(schema["properties"][field], value)
    assert _type(prop) == expected
    if field == "_id":
        assert "null" not in prop["type"]  # the key stays required
    wider = {**schema, "properties": {**schema["properties"], field: prop}}
    batch = documents_to_batch([{**SAMPLE[0], field: value}], wider, "db.c")  # the value now fits
    assert batch.num_rows == 1


def test_values_that_fit_leave_the_schema_as_it_is():
    schema = _schema()
    fitting = [{**SAMPLE[0], "i32": None, "i64": 3, "f": Int64(4), "dec": 2.5, "doc": {"a": None}, "arr": []}]
    assert widened_schema(schema, fitting) is schema


def test_a_sub_field_widens_inside_its_document_and_new_fields_become_columns():
    schema = _schema()
    wider = widened_schema(schema, [{"_id": ObjectId(), "doc": {"a": 0.5}, "new": MinKey()},
                                    {"_id": ObjectId(), "new": 1, "docs": [{"k": Int64(2)}]}])
    props = wider["properties"]
    assert _type(props["doc"]) == "document" and _type(props["doc"]["properties"]["a"]) == "float64"
    assert _type(props["docs"]["items"]["properties"]["k"]) == "int64"
    assert _type(props["new"]) == "bson" and "null" in props["new"]["type"]  # as discovery types both values
    assert list(props)[-1] == "new"


def test_a_value_no_type_can_carry_is_still_an_error():
    schema = _schema()
    schema["properties"]["s"] = widen(schema["properties"]["s"], 5)  # bson
    doc = {**SAMPLE[0], "s": {"$date": 5}}  # Extended JSON would read it back as a date
    assert widened_schema(schema, [doc]) is schema
    with pytest.raises(SourceError, match="type markers"):
        documents_to_batch([doc], schema, "db.c")


def _stream(schema: dict) -> CatalogStream:
    return CatalogStream(name="c", namespace="db", json_schema=schema, sync_mode="cdc")


def test_in_place_changes_and_replaced_types_and_their_record():
    before = _stream(_schema())
    wider = widened_schema(before.json_schema, [{"_id": ObjectId(), "i32": Int64(1), "new": "x"}])
    in_place = widened(before, wider)
    assert needs_reload(before, in_place) == []
    assert set(in_place.x_olake[DRIFT]) == {"i32", "new"} and in_place.x_olake[DRIFT]["new"]["from"] is None
    replaced = widened(in_place, widened_schema(in_place.json_schema, [{"_id": ObjectId(), "i32": 0.5, "s": 1}]))
    assert needs_reload(in_place, replaced) == ["i32", "s"]
    assert replaced.x_olake[DRIFT]["i32"]["from"] == before.json_schema["properties"]["i32"]  # the catalog's

    state = StreamState("cdc", "c", "db", None, schema_drift=replaced.x_olake[DRIFT])
    again = apply_recorded(_stream(_schema()), state)  # the next run, with the same catalog
    assert again.json_schema["properties"] == replaced.json_schema["properties"]
    assert explained(_stream(_schema()), again) == {"i32", "s", "new"}
    edited = _schema()
    edited["properties"]["s"] = {"type": ["string", "null"], "x-olake-type": "bson"}  # the user changed it
    kept = apply_recorded(_stream(edited), state)
    assert kept.json_schema["properties"]["s"] == edited["properties"]["s"] and "s" not in kept.x_olake[DRIFT]
