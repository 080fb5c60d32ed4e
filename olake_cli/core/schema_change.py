"""Source schema changes against the catalog: which are safe widenings and which lose values.

Types are compared as ``x-olake-type`` strings (the destination type a column has). The rule, used at
run start, during change capture and by destinations:

* the same olake type (``varchar(10)`` to ``text`` are both ``string``): nothing to do;
* a widening that keeps every value exactly (int16 < int32 < int64, float32 < float64, an integer into
  a decimal with enough integer digits, decimal(p,s) into decimal(p2,s2) with s2 >= s and
  p2 - s2 >= p - s, and the same inside arrays of the same shape): the stream continues with the wider
  type;
* anything else (text to numeric, a narrowing, timestamp to timestamptz, ...) is incompatible: the run
  fails naming the column before any value under the new shape is acknowledged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_INT_RANK = {"int16": 0, "int32": 1, "int64": 2}
_INT_DIGITS = {"int16": 5, "int32": 10, "int64": 19}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")

SAME, WIDEN, INCOMPATIBLE = "same", "widen", "incompatible"


def type_change(old: str, new: str) -> str:
    """``same``, ``widen`` or ``incompatible`` for a column whose olake type goes from ``old`` to ``new``."""
    if old == new:
        return SAME
    for nesting in ("array<", "ndarray<"):
        if old.startswith(nesting) and new.startswith(nesting):
            return type_change(old[len(nesting):-1], new[len(nesting):-1])
    if old in _INT_RANK and new in _INT_RANK:
        return WIDEN if _INT_RANK[new] > _INT_RANK[old] else INCOMPATIBLE
    if (old, new) == ("float32", "float64"):
        return WIDEN
    new_decimal = _DECIMAL.fullmatch(new)
    if new_decimal is not None:
        precision, scale = int(new_decimal.group(1)), int(new_decimal.group(2))
        if old in _INT_DIGITS:
            return WIDEN if precision - scale >= _INT_DIGITS[old] else INCOMPATIBLE
        old_decimal = _DECIMAL.fullmatch(old)
        if old_decimal is not None:
            old_precision, old_scale = int(old_decimal.group(1)), int(old_decimal.group(2))
            if scale >= old_scale and precision - scale >= old_precision - old_scale:
                return WIDEN
    return INCOMPATIBLE


@dataclass
class SchemaDiff:
    """How a table's live columns differ from a stream's catalog columns (by name)."""

    added: list[str] = field(default_factory=list)  # live columns the catalog does not select
    dropped: list[str] = field(default_factory=list)  # catalog columns the table no longer has
    widened: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (old, new) olake type
    incompatible: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """Whether anything differs."""
        return bool(self.added or self.dropped or self.widened or self.incompatible)


def olake_type_of(prop: Any) -> str | None:
    """The ``x-olake-type`` of a json_schema property (None if it has none)."""
    return prop.get("x-olake-type") if isinstance(prop, dict) else None


def compare_columns(catalog_props: dict[str, Any], live: dict[str, str]) -> SchemaDiff:
    """Compare catalog properties with the live columns (name -> olake type), in catalog order."""
    diff = SchemaDiff(added=[name for name in live if name not in catalog_props])
    for name, prop in catalog_props.items():
        if name not in live:
            diff.dropped.append(name)
            continue
        old, new = olake_type_of(prop), live[name]
        verdict = SAME if old is None else type_change(old, new)
        if verdict == WIDEN:
            diff.widened[name] = (old, new)
        elif verdict == INCOMPATIBLE:
            diff.incompatible[name] = (old, new)
    return diff


def describe_incompatible(label: str, diff: SchemaDiff) -> str:
    """One line naming every incompatible column change of stream ``label`` and what to do."""
    parts = ", ".join(f"'{name}' {old} -> {new}" for name, (old, new) in diff.incompatible.items())
    return (f"{label}: column type change(s) that would lose values: {parts}; run discover, update the "
            f"catalog and let the stream load anew")
