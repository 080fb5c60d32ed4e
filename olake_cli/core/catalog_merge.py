"""Rediscovery that keeps the user's edits: ``olake discover --catalog old.json``."""

from __future__ import annotations

from typing import Any

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.codec.types import NDARRAY, array_shape

_EDITS = ("selected", "sync_mode", "cursor_field", "cursor_lookback", "primary_key", "skip_initial_load",
          "row_filter", "transform")


def merge_edits(discovered: dict[str, Any], previous: Catalog) -> tuple[dict[str, Any], list[str]]:
    """The new catalog with each known stream's edits carried over, and what changed, one line each.

    Kept per stream: selected, sync_mode, cursor_field, cursor_lookback, primary_key, skip_initial_load
    (for a stream still in cdc), row_filter, transform, the columns the user removed from json_schema
    and the ``ndarray<T>`` array columns (whatever shapes the data shows now: an ndarray holds every
    one, and a change of type would load the stream anew), as long as they still make sense for the
    new discovery (a mode still supported, a cursor still a column); anything dropped is said. New
    streams arrive with the
    discovered defaults; streams that vanished are listed.
    """
    old = {s.key: s for s in previous.streams}
    notes: list[str] = []
    merged = []
    for entry in discovered["streams"]:
        stream = CatalogStream.from_dict(entry)
        before = old.pop(stream.key, None)
        if before is None:
            if previous.streams:
                notes.append(f"{stream.label}: new stream (sync_mode {stream.sync_mode}, selected)")
            merged.append(entry)
            continue
        merged.append(_carry_over(entry, stream, before, notes))
    notes += [f"{s.label}: no longer exists at the source; dropped from the catalog" for s in old.values()]
    return {**discovered, "streams": merged}, notes


def _carry_over(entry: dict, stream: CatalogStream, before: CatalogStream, notes: list[str]) -> dict:
    """``entry`` with ``before``'s edits applied where they still fit."""
    result = dict(entry)
    mine = before.to_dict()
    for key in _EDITS:
        if key in mine:
            result[key] = mine[key]
    if result.get("sync_mode") not in stream.supported_sync_modes:
        notes.append(f"{stream.label}: sync_mode '{result.get('sync_mode')}' is no longer supported "
                     f"({', '.join(stream.supported_sync_modes)}); back to full_refresh")
        result["sync_mode"] = "full_refresh"
    if result.get("sync_mode") != "cdc":
        result.pop("skip_initial_load", None)
    columns = stream.columns
    cursor = result.get("cursor_field")
    if cursor and cursor[0] not in columns:
        notes.append(f"{stream.label}: cursor_field '{cursor[0]}' is no longer a column; removed")
        result.pop("cursor_field", None)
        if result["sync_mode"] == "incremental":
            result["sync_mode"] = "full_refresh"
    removed = [c for c in _discovered_columns(before) if c not in before.columns and c in columns]
    props = {k: v for k, v in entry["json_schema"].get("properties", {}).items() if k not in removed}
    props.update(_kept_ndarrays(props, before.json_schema.get("properties", {})))
    if props != entry["json_schema"].get("properties", {}):
        result["json_schema"] = {**entry["json_schema"], "properties": props}
    added = [c for c in columns if c not in _discovered_columns(before)]
    if added:
        notes.append(f"{stream.label}: new column(s) {', '.join(added)} (copied from the next load on)")
    return result


def _kept_ndarrays(discovered: dict, previous: dict) -> dict:
    """The previous ``ndarray<T>`` properties of columns discovered again as arrays of the same T."""
    kept = {}
    for name, prop in discovered.items():
        old = (previous.get(name) or {}).get("x-olake-type") or ""
        old_shape, new_shape = array_shape(old), array_shape(prop.get("x-olake-type") or "")
        if old_shape and old_shape[1] == NDARRAY and new_shape and new_shape[0] == old_shape[0]:
            nullable = "null" in (prop.get("type") or [])
            kept[name] = {**previous[name], "type": ["null", "object"] if nullable else ["object"]}
    return kept


def _discovered_columns(stream: CatalogStream) -> list[str]:
    """Every column discovery listed for ``stream`` last time (kept in x-olake), else its columns."""
    return list(stream.x_olake.get("discovered_columns") or stream.columns)
