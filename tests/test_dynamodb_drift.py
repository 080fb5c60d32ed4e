"""DynamoDB numbers that outgrow their column (no server needed): the integer-digit bound discovery
sets, the one widening rule (a wider scale or bound within 38 digits, else exact decimal text), that
the widening is in place for the pipeline (``needs_reload``) and recorded for later runs without a
reload, and that the converter refuses what the widened column must hold instead of rounding."""

from __future__ import annotations

from decimal import Decimal

import pytest

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import SourceError
from olake_cli.core.schema_drift import (DRIFT, INTEGER_DIGITS, apply_recorded, exact_number_widening, needs_reload,
                                         record_in_state, widened)
from olake_cli.core.state import StreamState
from olake_cli.pipeline.stream_work import column_types, reload_reason
from olake_cli.sources.dynamodb.batches import items_to_batch
from olake_cli.sources.dynamodb.drift import widened_schema
from olake_cli.sources.dynamodb.schema import infer_json_schema

KEYS = [("pk", "S"), ("sk", "N")]
SAMPLE = [{"pk": {"S": "a"}, "sk": {"N": "1"}, "v": {"N": "12.5"}, "ns": {"NS": ["1.5"]},
           "m": {"M": {"x": {"N": "3"}}}, "l": {"L": [{"N": "7"}]}},
          {"pk": {"S": "b"}, "sk": {"N": "22"}, "v": {"N": "-3.5"}, "ns": {"NS": ["2"]},
           "m": {"M": {"x": {"N": "40"}}}, "l": {"L": [{"N": "8"}]}}]


def _number(prop: dict) -> tuple:
    return prop["x-olake-type"], prop.get(INTEGER_DIGITS)


def _item(**values: dict) -> dict:
    return {"pk": {"S": "z"}, "sk": {"N": "9"}, **values}


def test_discovery_bounds_integer_digits_with_room_for_a_larger_scale():
    props = infer_json_schema(SAMPLE, KEYS)["properties"]
    # the sample's integer digits plus half of the digits left beside the scale: 2 + (38 - 1 - 2) // 2
    assert _number(props["v"]) == ("decimal(38,1)", 19)
    assert _number(props["sk"]) == ("decimal(38,0)", 20)
    assert _number(props["ns"]["items"]) == ("decimal(38,1)", 19)
    assert _number(props["m"]["properties"]["x"]) == ("decimal(38,0)", 20)
    assert _number(props["l"]["items"]) == ("decimal(38,0)", 19)


@pytest.mark.parametrize("value, widened_to", [
    ({"N": "1.25"}, ("decimal(38,2)", 19)),                                   # a wider scale
    ({"N": "-0.0001"}, ("decimal(38,4)", 19)),
    ({"N": "1" + "0" * 24 + ".5"}, ("decimal(38,1)", 25)),                    # more integer digits: the bound
    ({"N": "1" + "0" * 24 + ".125"}, ("decimal(38,3)", 25)),                  # both
    ({"N": "1" + "0" * 30 + ".12345678"}, ("numeric", None)),                 # 31 + 8 digits: beyond 38
    ({"N": "1E+125"}, ("numeric", None)),                                     # DynamoDB's extremes
    ({"N": "-1E-130"}, ("numeric", None)),
    ({"N": "99.5"}, ("decimal(38,1)", 19)),                                   # it fits: unchanged
    ({"NULL": True}, ("decimal(38,1)", 19)),
])
def test_a_number_beyond_its_column_widens_it_by_the_rule(value, widened_to):
    schema = infer_json_schema(SAMPLE, KEYS)
    wider = widened_schema(schema, [_item(v=value)])
    assert _number(wider["properties"]["v"]) == widened_to
    assert (wider is schema) == (widened_to == ("decimal(38,1)", 19))


def test_numbers_in_sets_lists_and_maps_widen_their_elements_and_fields():
    schema = infer_json_schema(SAMPLE, KEYS)
    wider = widened_schema(schema, [_item(ns={"NS": ["0.125"]}, l={"L": [{"N": "1.5"}]},
                                          m={"M": {"x": {"N": "1E+60"}}})])["properties"]
    assert wider["ns"]["x-olake-type"] == "array<decimal(38,3)>" and _number(wider["ns"]["items"]) == ("decimal(38,3)", 19)
    assert wider["l"]["x-olake-type"] == "array<decimal(38,1)>"
    assert _number(wider["m"]["properties"]["x"]) == ("numeric", None)
    assert wider["m"]["x-olake-type"] == "document"


def test_another_type_or_attribute_is_no_number_drift():
    schema = infer_json_schema(SAMPLE, KEYS)
    assert widened_schema(schema, [_item(v={"S": "12"}), _item(other={"N": "1.25"})]) is schema


def test_a_catalog_without_the_bound_widens_to_text_keeping_every_integer_digit():
    """decimal(38,1) alone may hold 37 integer digits: only exact text keeps them beside two fraction digits."""
    schema = infer_json_schema(SAMPLE, KEYS)
    del schema["properties"]["v"][INTEGER_DIGITS]
    assert _number(widened_schema(schema, [_item(v={"N": "1.25"})])["properties"]["v"]) == ("numeric", None)


def test_the_widening_is_in_place_recorded_and_needs_no_reload_on_the_next_run():
    stream = CatalogStream(name="t", namespace="dynamodb", json_schema=infer_json_schema(SAMPLE, KEYS),
                           sync_mode="cdc")
    scaled = widened(stream, widened_schema(stream.json_schema, [_item(v={"N": "1.25"}, ns={"NS": ["0.5"]})]))
    text = widened(scaled, widened_schema(scaled.json_schema, [_item(v={"N": "1E+100"})]))
    assert needs_reload(stream, scaled) == [] and needs_reload(scaled, text) == []
    assert text.x_olake[DRIFT]["v"]["from"] == stream.json_schema["properties"]["v"]

    load = StreamState("cdc", "t", "dynamodb", None, columns=stream.columns,
                       column_types=column_types(stream))
    saved = record_in_state(load, text)
    again = apply_recorded(stream, saved)  # the next run, with the discovered catalog
    assert again.json_schema["properties"]["v"]["x-olake-type"] == "numeric"
    assert reload_reason(again, saved) is None  # no reload of the table for a widening in place


@pytest.mark.parametrize("old, new, in_place", [
    ({"x-olake-type": "decimal(38,1)", INTEGER_DIGITS: 19}, {"x-olake-type": "decimal(38,2)", INTEGER_DIGITS: 19}, True),
    ({"x-olake-type": "decimal(38,1)", INTEGER_DIGITS: 19}, {"x-olake-type": "decimal(38,2)", INTEGER_DIGITS: 18}, False),
    ({"x-olake-type": "decimal(38,1)"}, {"x-olake-type": "decimal(38,2)", INTEGER_DIGITS: 36}, False),
    ({"x-olake-type": "decimal(38,1)"}, {"x-olake-type": "numeric"}, True),
    ({"x-olake-type": "numeric"}, {"x-olake-type": "decimal(38,1)"}, False),
    ({"x-olake-type": "int32"}, {"x-olake-type": "numeric"}, False),
])
def test_which_number_changes_keep_every_value(old, new, in_place):
    assert exact_number_widening(old, new) is in_place


def test_a_number_beyond_the_bound_is_refused_not_rounded():
    schema = infer_json_schema(SAMPLE, KEYS)
    ok = items_to_batch([_item(v={"N": "1" + "0" * 18 + ".5"})], schema, "d.t", ("pk", "sk"))
    assert ok.column("v").to_pylist() == [Decimal("1" + "0" * 18 + ".5")]
    with pytest.raises(SourceError, match=r"does not fit x-olake-type decimal\(38,1\) \(up to 19 integer digits\)"):
        items_to_batch([_item(v={"N": "1" + "0" * 19 + ".5"})], schema, "d.t", ("pk", "sk"))
