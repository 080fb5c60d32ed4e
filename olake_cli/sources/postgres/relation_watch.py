"""Schema changes seen during change capture, from pgoutput Relation messages.

pgoutput announces a table's columns (name, type oid, typmod) before its first change and again after
every ALTER. Each new announcement of a captured stream is compared with the stream's catalog schema
(``core/schema_change``), before any change under the new shape is emitted:

* a column whose values still fit the catalog type (same olake type, or narrower: an older version
  replayed after a widening) needs nothing;
* a widened column (int to bigint, real to double, a wider numeric) widens the stream: a new CATALOG
  message carries the wider type and later rows use it;
* a dropped column is null in every later row (a warning says so once);
* a column that disappears while another appears (a rename, or a drop and an add) and any type change
  that would lose values fail the run with a config error naming the columns; nothing under the new
  shape is acknowledged, so the slot stays before it;
* an added column is not copied until the catalog selects it (a warning says so once).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import ConfigError
from olake_cli.core.schema_change import WIDEN, compare_columns, describe_incompatible, type_change

ColumnInfo = tuple[str, int, int]  # (name, type oid, typmod) as the Relation message gives them


class RelationWatch:
    """Checks each new Relation version of the captured streams against their catalog schemas."""

    def __init__(self, connect: Callable, log: Callable[[str], None]) -> None:
        self._connect, self.log = connect, log
        self._conn = None
        self._types: dict[tuple[int, int, str | None], dict] = {}
        self._warned: set[tuple] = set()

    def close(self) -> None:
        """Close the catalog connection, if one was opened."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def check(self, stream: CatalogStream, columns: list[ColumnInfo]) -> CatalogStream | None:
        """Validate a relation version; returns the widened stream when the catalog must widen."""
        catalog = stream.json_schema.get("properties", {})
        props = {name: self._property(oid, typmod, (catalog.get(name) or {}).get("x-olake-type"))
                 for name, oid, typmod in columns}
        live = {name: prop["x-olake-type"] for name, prop in props.items()}
        diff = compare_columns(catalog, live)
        for name, (old, new) in list(diff.incompatible.items()):
            if type_change(new, old) == WIDEN:  # an older, narrower version: its values fit
                del diff.incompatible[name]
        if diff.incompatible:
            raise ConfigError(describe_incompatible(stream.label, diff))
        if diff.dropped and diff.added:
            raise ConfigError(f"{stream.label}: column(s) {', '.join(diff.dropped)} disappeared while "
                              f"{', '.join(diff.added)} appeared (renamed?); run discover, update the catalog "
                              f"and let the stream load anew")
        self._warn_once(stream, "dropped", diff.dropped,
                        "were dropped at the source; they are null in every later row")
        self._warn_once(stream, "added", diff.added,
                        "are not in the catalog and are not copied; run discover and update the catalog "
                        "to capture them")
        if not diff.widened:
            return None
        widened = copy.copy(stream)
        widened.json_schema = copy.deepcopy(stream.json_schema)
        for name in diff.widened:
            nullable = "null" in stream.json_schema["properties"][name].get("type", ["null"])
            widened.json_schema["properties"][name] = _with_nullable(props[name], nullable)
        self.log(f"{stream.label}: column(s) " + ", ".join(f"'{n}' {o} -> {w}" for n, (o, w) in diff.widened.items())
                 + " widened at the source; later rows carry the wider type")
        return widened

    def _warn_once(self, stream: CatalogStream, kind: str, names: list[str], text: str) -> None:
        fresh = [n for n in names if (stream.key, kind, n) not in self._warned]
        if fresh:
            self._warned.update((stream.key, kind, n) for n in fresh)
            self.log(f"{stream.label}: column(s) {', '.join(fresh)} {text}")

    def _property(self, type_oid: int, typmod: int, catalog_type: str | None) -> dict:
        """The property of a column of this type; an array keeps its catalog type's shape (pgoutput
        announces no dimensions, and the shape comes from the data)."""
        from olake_cli.sources.postgres.types import type_property

        key = (type_oid, typmod, catalog_type)
        if key not in self._types:
            if self._conn is None:
                self._conn = self._connect()
            self._types[key] = type_property(self._conn, type_oid, typmod, catalog_type=catalog_type)
        return self._types[key]


def _with_nullable(prop: dict, nullable: bool) -> dict:
    """A copy of a (nullable) property, without "null" in its type when the column is NOT NULL."""
    prop = copy.deepcopy(prop)
    if not nullable:
        prop["type"] = [t for t in prop["type"] if t != "null"]
    return prop
