"""Schema drift: a source widening a stream's columns at run time, recorded so that later runs keep it.

A source whose records have no fixed schema (MongoDB) may meet a value its catalog types cannot hold.
It then offers a wider json_schema (``errors.SchemaDrift``, or a widened stream during change
capture); the changed columns are recorded in the stream's ``x-olake.schema_drift`` and in the state
of its load (``stream_state.schema_drift``) as ``{column: {"from": catalog property or null for a new
column, "to": property}}``. A new column, or a top-level column whose type widens as
``core.schema_change`` allows, is taken in place; any other change replaces a column's type, and the
stream is loaded anew under the new schema. Later runs read a column with its recorded property while
the catalog still has its ``from`` property (a catalog edited since wins, and the record is dropped).
"""

from __future__ import annotations

import copy
import re

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.codec.types import element_property
from olake_cli.core.schema_change import INCOMPATIBLE, olake_type_of, type_change
from olake_cli.core.state import State, StreamState

DRIFT = "schema_drift"
INTEGER_DIGITS = "x-olake-integer-digits"
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")


def drift_of(stream: CatalogStream) -> dict[str, dict]:
    """The stream's recorded drift (column -> {"from", "to"})."""
    return stream.x_olake.get(DRIFT) or {}


def widened(stream: CatalogStream, json_schema: dict) -> CatalogStream:
    """A copy of ``stream`` whose columns are those of ``json_schema``; each changed column is recorded
    as drift (its ``from`` stays the catalog's property when it drifted before)."""
    old = stream.json_schema.get("properties", {})
    new = json_schema.get("properties", {})
    drift = dict(drift_of(stream))
    for name, prop in new.items():
        if old.get(name) != prop:
            before = drift.get(name, {"from": copy.deepcopy(old.get(name))})["from"]
            drift[name] = {"from": before, "to": copy.deepcopy(prop)}
    result = copy.copy(stream)
    result.json_schema = {**stream.json_schema, "properties": {**old, **copy.deepcopy(new)}}
    result.x_olake = {**stream.x_olake, DRIFT: drift}
    return result


def column_type(stream: CatalogStream, column: str) -> str:
    """A column's x-olake-type for messages ("absent" for a column the stream lacks), with its integer
    digits when it bounds them."""
    prop = stream.json_schema.get("properties", {}).get(column)
    bound = prop.get(INTEGER_DIGITS) if isinstance(prop, dict) else None
    return (olake_type_of(prop) or "absent") + (f" (up to {bound} integer digits)" if bound is not None else "")


def changed_columns(before: CatalogStream, after: CatalogStream) -> list[str]:
    """The columns whose property differs between two versions of a stream."""
    old = before.json_schema.get("properties", {})
    return [name for name, prop in after.json_schema.get("properties", {}).items() if old.get(name) != prop]


def needs_reload(before: CatalogStream, after: CatalogStream) -> list[str]:
    """The changed columns a destination cannot take in place (their type is replaced)."""
    old = before.json_schema.get("properties", {})
    new = after.json_schema.get("properties", {})
    return [name for name in changed_columns(before, after) if not _in_place(old.get(name), new[name])]


def _in_place(old: dict | None, new: dict) -> bool:
    """A new column, a top-level scalar column whose type widens (``schema_change.type_change``), or an
    exact number widening."""
    if old is None or exact_number_widening(old, new):
        return True
    before, after = olake_type_of(old), olake_type_of(new)
    if before is None or after is None or "document" in before or "document" in after:
        return False
    if before.startswith("array<") or after.startswith("array<"):
        return False
    return before != after and type_change(before, after) != INCOMPATIBLE


def exact_number_widening(old: dict, new: dict) -> bool:
    """Whether ``new`` differs from ``old`` in decimal numbers only, each one widened exactly (see the module)."""
    before, after = olake_type_of(old), olake_type_of(new)
    if before is None or after is None:
        return False
    if before.startswith("array<") and after.startswith("array<"):
        return exact_number_widening(element_property(old, before), element_property(new, after))
    if before == after == "document":
        subs, new_subs = old.get("properties") or {}, new.get("properties") or {}
        return subs.keys() == new_subs.keys() and all(exact_number_widening(subs[n], new_subs[n]) for n in subs)
    digits = decimal_digits(old)
    if digits is None or before == after and old == new:
        return old == new
    if after == "numeric":
        return True
    new_digits = decimal_digits(new)
    return new_digits is not None and new_digits[0] >= digits[0] and new_digits[1] >= digits[1]


def decimal_digits(prop: dict) -> tuple[int, int] | None:
    """(integer digits, fraction digits) a ``decimal(p,s)`` property's values may have (None: not a decimal)."""
    match = _DECIMAL.fullmatch(olake_type_of(prop) or "")
    if match is None:
        return None
    precision, scale = int(match[1]), int(match[2])
    bound = prop.get(INTEGER_DIGITS)
    return (min(bound, precision - scale) if isinstance(bound, int) else precision - scale), scale


def apply_recorded(stream: CatalogStream, stream_state: StreamState | None) -> CatalogStream:
    """``stream`` with the drift its state records applied, for each column whose catalog property is
    still the recorded ``from`` (or already the ``to``); ``stream`` itself when nothing applies."""
    recorded = (stream_state.schema_drift if stream_state is not None else None) or {}
    props = stream.json_schema.get("properties", {})
    kept = {name: change for name, change in recorded.items()
            if props.get(name) in (change.get("from"), change.get("to"))}
    if not kept:
        return stream
    result = widened(stream, {"properties": {name: change["to"] for name, change in kept.items()}})
    result.x_olake[DRIFT] = {**drift_of(stream), **kept}
    return result


def apply_to_catalog(catalog: Catalog, state: State | None) -> None:
    """Apply each stream's recorded drift (``apply_recorded``) to ``catalog``, in place."""
    if state is not None:
        catalog.streams = [apply_recorded(s, state.find(s.namespace, s.name)) for s in catalog.streams]


def explained(mine: CatalogStream, theirs: CatalogStream) -> set[str]:
    """The columns in which ``theirs`` (a reader's stream) differs from ``mine`` by recorded drift:
    ``theirs`` holds the drift's ``to`` where ``mine`` holds its ``from`` (or the ``to`` already, or a
    step between them that the ``to`` widens exactly: numbers widened again in a later run)."""
    props, their_props = mine.json_schema.get("properties", {}), theirs.json_schema.get("properties", {})
    return {name for name, change in drift_of(theirs).items()
            if their_props.get(name) == change.get("to")
            and (props.get(name) in (change.get("from"), change.get("to"))
                 or isinstance(props.get(name), dict) and exact_number_widening(props[name], their_props[name]))}


def record_in_state(stream_state: StreamState, stream: CatalogStream) -> StreamState:
    """A copy of ``stream_state`` recording the stream's drift (and its columns, a new one included)."""
    ss = stream_state.copy()
    if drift_of(stream):
        ss.schema_drift = copy.deepcopy(drift_of(stream))
    if ss.columns is not None:
        ss.columns = stream.columns
    if ss.column_types is not None:  # the load goes on with the widened types (reload_reason compares them)
        props = stream.json_schema.get("properties", {})
        ss.column_types = {**ss.column_types,
                           **{name: olake_type_of(props.get(name)) for name in drift_of(stream)}}
    return ss
