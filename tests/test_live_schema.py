"""Rename detection by attnum at run start (pure logic; the end-to-end test is test_e2e_schema_at_start)."""

from __future__ import annotations

from olake_cli.sources.postgres.live_schema import null_column, renamed_columns


def test_a_missing_column_whose_attnum_slot_holds_an_unselected_column_was_renamed() -> None:
    assert renamed_columns(["id", "a", "old", "b"], {"id": 1, "a": 2, "new": 3, "b": 4}, set()) == {"old": ["new"]}
    # the last column: a column added after it was dropped is reported too (dropped while another appeared)
    assert renamed_columns(["id", "a", "old"], {"id": 1, "a": 2, "x": 5}, {3}) == {"old": ["x"]}
    # two neighbours missing, one dropped (attnum 2) and one renamed (attnum 3): they pair up in order
    assert renamed_columns(["id", "gone", "old", "b"], {"id": 1, "new": 3, "b": 4}, {2}) == {"old": ["new"]}


def test_dropped_and_added_columns_are_not_renames() -> None:
    assert renamed_columns(["id", "legacy", "b"], {"id": 1, "b": 3, "x": 8}, {2}) == {}
    assert renamed_columns(["id", "a", "b"], {"id": 1, "a": 2, "b": 3, "x": 5}, set()) == {}
    # catalog columns out of attnum order: the slots mean nothing, no verdict
    assert renamed_columns(["b", "gone", "a"], {"a": 1, "b": 2, "new": 3}, set()) == {}


def test_a_dropped_column_is_scanned_as_null_of_its_read_type() -> None:
    assert null_column("n", {"x-olake-type": "int64"}).type_name == "int8"
    assert null_column("n", {"x-olake-type": "decimal(10,2)"}).type_name == "text"
    assert null_column("n", {"x-olake-type": "array<timestamptz>"}).type_name == "timestamptz[]"
    assert null_column("n", {"x-olake-type": "interval"}).type_name == "int8[]"
    assert null_column("n", {"x-olake-type": "array<interval>"}).type_name == "text[]"
    assert null_column("n", {}).olake_type == "string"
