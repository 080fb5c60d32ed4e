"""DynamoDB attribute values: types inferred from a sample, items as Arrow batches (exact, or an error
naming the attribute and the key), keys and positions as text, shard lineage (no server needed)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from olake_cli.core.codec.scanned import to_destination
from olake_cli.core.errors import SourceError, StateError
from olake_cli.core.opid import OpId
from olake_cli.core.state import State, StreamState, merge_state
from olake_cli.sources.dynamodb.attributes import key_from_text, key_text, number_shape
from olake_cli.sources.dynamodb.batches import items_to_batch
from olake_cli.sources.dynamodb.positions import record_op, time_ms, time_text
from olake_cli.sources.dynamodb.scan import parse_segment_bound, segment_bound
from olake_cli.sources.dynamodb.schema import infer_json_schema
from olake_cli.sources.dynamodb.shards import Shard, lineage_order

KEYS = [("pk", "S"), ("sk", "N")]


def _types(schema: dict) -> dict:
    return {name: prop["x-olake-type"] for name, prop in schema["properties"].items()}


def test_types_follow_the_sample():
    items = [
        {"pk": {"S": "a"}, "sk": {"N": "1"}, "s": {"S": "x"}, "price": {"N": "12.5"}, "big": {"N": "1E+40"},
         "b": {"B": b"\x00"}, "ok": {"BOOL": True}, "ss": {"SS": ["a"]}, "ns": {"NS": ["1.25"]},
         "bs": {"BS": [b"\x01"]}, "m": {"M": {"x": {"N": "1"}, "y": {"S": "y"}}}, "l": {"L": [{"S": "a"}]},
         "mix": {"S": "x"}, "var": {"M": {"a": {"N": "1"}}}, "ml": {"L": [{"S": "a"}, {"N": "1"}]},
         "nul": {"NULL": True}, "sometimes": {"NULL": True}},
        {"pk": {"S": "b"}, "sk": {"N": "2.75"}, "price": {"N": "-100.125"}, "big": {"N": "0.5"},
         "mix": {"N": "1"}, "var": {"M": {"b": {"N": "1"}}}, "sometimes": {"S": "now"}},
    ]
    schema = infer_json_schema(items, KEYS)
    assert list(schema["properties"])[:2] == ["pk", "sk"]
    assert _types(schema) == {
        "pk": "string", "sk": "decimal(38,2)", "b": "bytes", "big": "numeric", "bs": "array<bytes>",
        "l": "array<string>", "m": "document", "ml": "json", "mix": "json", "ns": "array<decimal(38,2)>",
        "nul": "json", "ok": "bool", "price": "decimal(38,3)", "s": "string", "sometimes": "string",
        "ss": "array<string>", "var": "json"}
    assert schema["properties"]["pk"]["type"] == ["string"]  # keys are never null
    assert schema["properties"]["m"]["properties"]["x"]["x-olake-type"] == "decimal(38,0)"
    assert schema["properties"]["ss"]["x-olake-dynamodb-type"] == "SS"


@pytest.mark.parametrize("text, shape", [("120.50", (3, 1)), ("1E+3", (4, 0)), ("0.001", (0, 3)), ("-0", (0, 0)),
                                         ("9" * 38, (38, 0)), ("1E-130", (0, 130))])
def test_number_shape(text, shape):
    assert number_shape(text) == shape


def test_items_become_exact_arrow_values_and_destination_values():
    items = [{"pk": {"S": "a"}, "sk": {"N": "1"}, "price": {"N": "12.5"}, "ss": {"SS": ["b", "a"]},
              "m": {"M": {"x": {"N": "3"}, "y": {"NULL": True}}}, "l": {"L": [{"S": "q"}]}, "mix": {"S": "t"},
              "nul": {"NULL": True}},
             {"pk": {"S": "b"}, "sk": {"N": "2.25"}, "price": {"N": "1E+2"}, "l": {"L": []}, "mix": {"BS": [b"\xff"]}}]
    schema = infer_json_schema(items, KEYS)
    batch = items_to_batch(items, schema, "d.t", ("pk", "sk"))
    rows = batch.to_pylist()
    assert rows[0]["price"] == Decimal("12.5") and rows[1]["price"] == Decimal("100.0")
    assert rows[0]["ss"] == ["b", "a"] and rows[1]["ss"] is None
    assert rows[0]["m"] == {"x": Decimal("3"), "y": '{"NULL":true}'}  # only ever NULL: json
    assert rows[1]["l"] == [] and rows[0]["l"] == ["q"]
    assert rows[0]["mix"] == '{"S":"t"}' and rows[1]["mix"] == '{"BS":["/w=="]}'
    assert rows[0]["nul"] == '{"NULL":true}' and rows[1]["nul"] is None
    table, warnings = to_destination(batch, schema, "d.t", ("pk", "sk"))
    assert not warnings and table.column("price").type == pa.decimal128(38, 1)
    assert table.column("sk").to_pylist() == [Decimal("1.00"), Decimal("2.25")]


@pytest.mark.parametrize("value, detail", [
    ({"N": "1.2345"}, "number 1.2345 does not fit x-olake-type decimal(38,3) (up to 18 integer digits) exactly"),
    ({"S": "12"}, "a S value does not fit x-olake-type decimal(38,3)"),
])
def test_a_value_that_does_not_fit_names_attribute_and_key(value, detail):
    schema = infer_json_schema([{"pk": {"S": "a"}, "sk": {"N": "1"}, "price": {"N": "1.125"}}], KEYS)
    good = {"pk": {"S": "a"}, "sk": {"N": "1"}, "price": {"N": "2"}}
    with pytest.raises(SourceError) as raised:
        items_to_batch([good, {"pk": {"S": "z"}, "sk": {"N": "7"}, "price": value}], schema, "d.t", ("pk", "sk"))
    assert "stream 'd.t', column 'price', row with key pk='z', sk='7'" in str(raised.value)
    assert detail in str(raised.value)


def test_an_attribute_the_catalog_lacks_is_an_error():
    schema = infer_json_schema([{"pk": {"S": "a"}, "sk": {"N": "1"}}], KEYS)
    with pytest.raises(SourceError, match="column 'new'.*not in the stream's json_schema; run discover again"):
        items_to_batch([{"pk": {"S": "a"}, "sk": {"N": "1"}, "new": {"S": "x"}}], schema, "d.t", ("pk", "sk"))


def test_keys_and_segment_bounds_round_trip():
    key = {"pk": {"B": b"\x00\xff"}, "sk": {"N": "12345678901234567890123456789012345678"}}
    assert key_from_text(key_text(key)) == key
    bound = segment_bound(7, 2, 4, key_text(key))
    assert bound[:2] == ["7", "2/4"] and parse_segment_bound(bound) == (2, 4, key_text(key))
    with pytest.raises(StateError):
        parse_segment_bound(["1", "4/4", None])


def test_chunks_added_for_the_rest_of_a_segment_keep_their_order_through_merges():
    """The state's merge sorts chunks by bounds: the chunk number first keeps indexes stable."""
    chunks = [{"status": "succeed", "min": segment_bound(i, i % 3, 3, None if i < 3 else f"k{i}"), "max": None}
              for i in range(12)]
    chunks[10]["status"] = "pending"
    ss = {"sync_type": "full-load", "stream_name": "t", "stream_namespace": "d",
          "stream_state": {"cursor_field": None, "chunks": chunks, "load_id": "x"}}
    one = StreamState.from_dict(ss)
    merged = merge_state(State(streams=[one]), State("stream", streams=[one.copy()]))
    assert [c.min for c in merged.streams[0].chunks] == [c["min"] for c in chunks]


def test_record_op_ids_lie_above_every_checkpoint():
    small, large = record_op("1100000000017454423009"), record_op(str(2**100 + 5))
    assert small > OpId(2**62, 0) and large > small
    assert small.to_key() < large.to_key()
    with pytest.raises(SourceError):
        record_op(str(2**127))


def test_shards_are_read_parents_first():
    shards = [Shard("c2", "p"), Shard("p", "gone"), Shard("c1", "p"), Shard("g", "c1"), Shard("other", None)]
    order = [s.shard_id for s in lineage_order(shards)]
    assert order.index("p") < order.index("c1") < order.index("g") and order.index("p") < order.index("c2")
    assert sorted(order) == sorted(s.shard_id for s in shards)


@pytest.mark.parametrize("ms", [0, 1, 999, 1_795_591_257_128, 253_402_300_799_999])
def test_position_times_round_trip_to_the_millisecond(ms):
    assert time_ms(time_text(ms)) == ms
    assert time_text(1_795_591_257_128) == "2026-11-25T07:20:57.128Z"
