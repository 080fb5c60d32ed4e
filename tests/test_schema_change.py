"""The widening rule for source column type changes (core/schema_change.py)."""

from __future__ import annotations

import pytest

from olake_cli.core.schema_change import (INCOMPATIBLE, SAME, WIDEN, compare_columns, describe_incompatible,
                                          type_change)


@pytest.mark.parametrize("old,new,verdict", [
    ("string", "string", SAME),                    # varchar(10) -> text
    ("int16", "int32", WIDEN), ("int32", "int64", WIDEN), ("int16", "int64", WIDEN),
    ("int64", "int32", INCOMPATIBLE),
    ("float32", "float64", WIDEN), ("float64", "float32", INCOMPATIBLE),
    ("int32", "decimal(12,2)", WIDEN), ("int32", "decimal(10,2)", INCOMPATIBLE),
    ("int64", "decimal(19,0)", WIDEN), ("int64", "decimal(38,20)", INCOMPATIBLE),
    ("decimal(8,2)", "decimal(12,4)", WIDEN), ("decimal(8,2)", "decimal(8,3)", INCOMPATIBLE),
    ("decimal(8,2)", "decimal(9,1)", INCOMPATIBLE),
    ("string", "numeric", INCOMPATIBLE), ("string", "decimal(10,0)", INCOMPATIBLE),
    ("int32", "string", INCOMPATIBLE), ("timestamp", "timestamptz", INCOMPATIBLE),
    ("array<int16>", "array<int64>", WIDEN), ("array<int64>", "array<int16>", INCOMPATIBLE),
    ("array<string>", "array<string>", SAME), ("int32", "array<int32>", INCOMPATIBLE),
    ("ndarray<int32>", "ndarray<int64>", WIDEN), ("ndarray<int64>", "ndarray<int32>", INCOMPATIBLE),
    ("array<int32>", "array<array<int32>>", INCOMPATIBLE), ("array<array<int32>>", "ndarray<int32>", INCOMPATIBLE),
    ("ndarray<int32>", "array<int32>", INCOMPATIBLE),  # another shape: the stream loads anew
])
def test_type_change(old, new, verdict):
    assert type_change(old, new) == verdict


def test_compare_columns_sorts_every_kind_of_difference():
    catalog = {"id": {"x-olake-type": "int32"}, "n": {"x-olake-type": "int32"},
               "code": {"x-olake-type": "string"}, "gone": {"x-olake-type": "bool"}}
    diff = compare_columns(catalog, {"id": "int32", "n": "int64", "code": "numeric", "fresh": "date"})
    assert diff.added == ["fresh"] and diff.dropped == ["gone"]
    assert diff.widened == {"n": ("int32", "int64")}
    assert diff.incompatible == {"code": ("string", "numeric")}
    assert diff.changed
    assert "'code' string -> numeric" in describe_incompatible("public.t", diff)
    assert not compare_columns(catalog, {k: v["x-olake-type"] for k, v in catalog.items()}).changed
