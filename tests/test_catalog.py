"""Catalog parsing: bare object or CATALOG message, defaults, user choices checked."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from olake_cli.core.catalog import Catalog, CatalogStream, load_catalog, parse_catalog
from olake_cli.core.errors import CatalogError
from olake_cli.core.messages import catalog_message, dumps, log_message

ORDERS = {
    "name": "orders", "namespace": "public",
    "json_schema": {"type": "object", "properties": {
        "id": {"type": "integer"}, "tenant": {"type": "string"}, "updated_at": {"type": "string"},
        "note": {"type": ["string", "null"]}}},
    "supported_sync_modes": ["full_refresh", "incremental", "cdc"],
    "source_defined_primary_key": [["tenant"], ["id"]],
    "default_cursor_field": ["updated_at"],
    "x-olake": {"relkind": "r"},
}
EVENTS = {"name": "events", "namespace": "audit", "json_schema": {"type": "object", "properties": {
    "seq": {"type": "integer"}}}, "supported_sync_modes": ["full_refresh"]}
CATALOG = {"streams": [ORDERS, EVENTS]}


def with_changes(stream: dict, **changes: object) -> dict:
    return {"streams": [{**copy.deepcopy(stream), **changes}]}


def test_bare_and_message_forms_parse_to_the_same_catalog() -> None:
    bare = parse_catalog(copy.deepcopy(CATALOG))
    wrapped = parse_catalog(catalog_message(copy.deepcopy(CATALOG)))
    assert bare == wrapped
    orders = bare.find("public", "orders")
    assert (orders.selected, orders.sync_mode, orders.cursor_field) == (True, "full_refresh", None)
    assert orders.key == ("public", "orders")
    assert orders.primary_key_columns == ["tenant", "id"]
    assert orders.cursor_column == "updated_at"
    assert orders.columns == ["id", "tenant", "updated_at", "note"]
    assert orders.x_olake == {"relkind": "r"}
    assert bare.find("public", "events") is None
    assert bare.find("audit", "events").primary_key_columns == []


def test_user_choices_override_discovered_values() -> None:
    catalog = parse_catalog(with_changes(ORDERS, sync_mode="incremental", cursor_field="id",
                                         primary_key=[["id"]]))
    stream = catalog.streams[0]
    assert stream.cursor_field == ["id"]
    assert stream.cursor_column == "id"
    assert stream.primary_key_columns == ["id"]


def test_selected_streams_skip_deselected_ones() -> None:
    catalog = parse_catalog({"streams": [ORDERS, {**EVENTS, "selected": False}]})
    assert [s.name for s in catalog.selected_streams()] == ["orders"]
    assert [s.name for s in catalog.streams] == ["orders", "events"]


def test_to_dict_round_trips_and_keeps_unknown_airbyte_keys() -> None:
    entry = {**copy.deepcopy(ORDERS), "sync_mode": "cdc", "cursor_field": ["updated_at"],
             "is_resumable": True, "destination_sync_mode": "append"}
    out = parse_catalog({"streams": [entry]}).to_dict()
    assert out["streams"][0] == {**entry, "selected": True}
    assert parse_catalog(out).to_dict() == out
    fresh = CatalogStream("t", None, {"type": "object"})
    assert Catalog([fresh]).to_dict() == {"streams": [{
        "name": "t", "namespace": None, "json_schema": {"type": "object"}, "supported_sync_modes": [],
        "source_defined_primary_key": [], "default_cursor_field": [], "selected": True,
        "sync_mode": "full_refresh"}]}


@pytest.mark.parametrize("catalog, expected", [
    (with_changes(ORDERS, sync_mode="incremental", default_cursor_field=[]),
     "catalog.json: stream 'public.orders': sync_mode 'incremental' needs a cursor_field"),
    (with_changes(ORDERS, sync_mode="incremental", cursor_field="missing"),
     "catalog.json: stream 'public.orders': cursor_field 'missing' is not a column of the stream"),
    (with_changes(ORDERS, sync_mode="incremental", cursor_field=["note", "inner"]),
     "catalog.json: stream 'public.orders': nested cursor_field ['note', 'inner'] is not supported; "
     "use a top-level column"),
    (with_changes(EVENTS, sync_mode="cdc"),
     "catalog.json: stream 'audit.events': sync_mode 'cdc' is not supported (supported: full_refresh)"),
    (with_changes(ORDERS, primary_key=[["nope"]]),
     "catalog.json: stream 'public.orders': primary_key column 'nope' is not a column of the stream"),
    ({"streams": [ORDERS, EVENTS, ORDERS]}, "catalog.json: stream 'public.orders' appears more than once"),
    (with_changes(ORDERS, sync_mode="sometimes"),
     "catalog.json: field 'streams[0].sync_mode': 'sometimes' is not one of 'full_refresh', "
     "'incremental', 'cdc'"),
    ({"streams": [ORDERS], "extra": 1}, "catalog.json: unknown field 'extra' (allowed: new_streams, streams)"),
    ({"type": "CATALOG", "catalog": {"streams": [{"name": "t"}]}},
     "catalog.json: missing required field 'streams[0].json_schema'"),
])
def test_bad_catalogs_are_catalog_errors(catalog: dict, expected: str) -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog(catalog, "catalog.json")
    assert info.value.message == expected


@pytest.mark.parametrize("entry, expected", [
    ({**ORDERS, "sync_mod": "cdc"}, "unknown field 'streams[0].sync_mod'; did you mean 'sync_mode'?"),
    ({**ORDERS, "sync_mode": "incremental", "cursor_fields": ["id"]},
     "unknown field 'streams[0].cursor_fields'; did you mean 'cursor_field'?"),
    ({"stream": ORDERS, "sync_mod": "cdc"}, "unknown field 'streams[0].sync_mod'; did you mean 'sync_mode'?"),
    ({"stream": {**ORDERS, "primary_keys": [["id"]]}},
     "unknown field 'streams[0].stream.primary_keys'; did you mean 'primary_key'?"),
])
def test_unknown_stream_keys_are_refused_with_the_closest_known_one(entry: dict, expected: str) -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog({"streams": [copy.deepcopy(entry)]}, "catalog.json")
    assert info.value.message == f"catalog.json: {expected}"


def test_airbyte_fields_and_x_extensions_are_kept() -> None:
    airbyte = {"source_defined_cursor": True, "is_resumable": True, "is_file_based": False,
               "destination_sync_mode": "append_dedup", "generation_id": 3, "minimum_generation_id": 0,
               "sync_id": 9, "include_files": False, "x-other-tool": {"owner": "bi"}}
    entry = {**copy.deepcopy(ORDERS), **airbyte}
    stream = parse_catalog({"streams": [entry]}).streams[0]
    assert stream.additional == airbyte
    assert stream.to_dict() == {**entry, "selected": True, "sync_mode": "full_refresh"}


def test_airbyte_configured_catalog_form_reads_as_the_flat_form() -> None:
    inner = {**copy.deepcopy(ORDERS), "sync_mode": "full_refresh", "is_resumable": True}
    configured = {"stream": inner, "sync_mode": "incremental", "cursor_field": ["id"],
                  "destination_sync_mode": "append", "primary_key": [["id"]]}
    stream = parse_catalog({"streams": [configured]}).streams[0]
    flat = parse_catalog({"streams": [{**inner, **{k: v for k, v in configured.items() if k != "stream"}}]})
    assert stream == flat.streams[0]
    assert (stream.sync_mode, stream.cursor_column, stream.primary_key_columns) == ("incremental", "id", ["id"])


def test_deselected_streams_are_not_checked_for_choices() -> None:
    catalog = parse_catalog(with_changes(EVENTS, sync_mode="cdc", selected=False))
    assert catalog.selected_streams() == []


def test_load_catalog_reads_discover_output_with_log_lines(tmp_path: Path) -> None:
    path = tmp_path / "catalog.json"
    path.write_bytes(dumps(log_message("INFO", "discovering")) + dumps(catalog_message(CATALOG)))
    assert load_catalog(path).to_dict() == parse_catalog(CATALOG).to_dict()
    path.write_text(json.dumps(CATALOG, indent=2))
    assert [s.name for s in load_catalog(path).streams] == ["orders", "events"]


def test_load_catalog_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=f"catalog file '{tmp_path}/none.json' does not exist"):
        load_catalog(tmp_path / "none.json")
    path = tmp_path / "bad.json"
    path.write_text('{"streams": [}')
    with pytest.raises(CatalogError, match="is not valid JSON: Expecting value at line 1 column 14"):
        load_catalog(path)
    path.write_text(json.dumps(with_changes(ORDERS, sync_mode="incremental", cursor_field="zzz")))
    with pytest.raises(CatalogError, match=f"^{path}: stream 'public.orders': cursor_field 'zzz'"):
        load_catalog(path)


TYPED = {"name": "typed", "namespace": "public", "json_schema": {"type": "object", "properties": {
    "id": {"type": "integer", "x-olake-type": "int64"},
    "doc": {"type": ["object", "null"], "x-olake-type": "json"},
    "flag": {"type": "boolean", "x-olake-type": "bool"},
    "at": {"type": "string", "x-olake-type": "timestamptz"},
    "price": {"type": "string", "x-olake-type": "decimal(10,2)"}}}}


@pytest.mark.parametrize("changes, expected", [
    ({"cursor_field": "doc"}, "cursor_field 'doc' has type json, whose values cannot be ordered; "
                              "choose a number, date or timestamp column"),
    ({"cursor_field": "flag"}, "cursor_field 'flag' has type bool, whose values cannot be ordered; "
                               "choose a number, date or timestamp column"),
    ({"cursor_field": "at", "cursor_lookback": 600},
     "cursor_lookback 600 must be an interval such as '10 minutes' for the timestamptz cursor 'at'"),
    ({"cursor_field": "at", "cursor_lookback": "ten minutes"},
     "cursor_lookback 'ten minutes' must be an interval such as '10 minutes' for the timestamptz cursor 'at'"),
    ({"cursor_field": "price", "cursor_lookback": "10 minutes"},
     "cursor_lookback '10 minutes' must be a non-negative number for the decimal(10,2) cursor 'price'"),
])
def test_cursor_types_and_lookback_windows_are_checked(changes: dict, expected: str) -> None:
    with pytest.raises(CatalogError) as info:
        parse_catalog(with_changes(TYPED, sync_mode="incremental", **changes), "catalog.json")
    assert info.value.message == "catalog.json: stream 'public.typed': " + expected


def test_a_fitting_lookback_is_kept_and_written_back() -> None:
    for cursor, lookback in (("at", "1 hour 30 minutes"), ("id", 1000), ("price", 2.5)):
        entry = with_changes(TYPED, sync_mode="incremental", cursor_field=cursor, cursor_lookback=lookback)
        stream = parse_catalog(entry).streams[0]
        assert stream.cursor_lookback == lookback
        assert stream.to_dict()["cursor_lookback"] == lookback
    with pytest.raises(CatalogError, match="cursor_lookback"):  # the schema refuses negative windows
        parse_catalog(with_changes(TYPED, sync_mode="incremental", cursor_field="id", cursor_lookback=-1))
