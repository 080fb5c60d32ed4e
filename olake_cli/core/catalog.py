"""The catalog: which streams a source offers and how the user wants each one copied."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from olake_cli.core.airbyte_form import olake_entry
from olake_cli.core.codec.airbyte_types import is_derived, is_plain, with_derived_types
from olake_cli.core.errors import CatalogError
from olake_cli.core.validation import load_json_file, validate

SYNC_MODES = ("full_refresh", "incremental", "cdc")
# how ``write`` applies an Airbyte source's stream (the ConfiguredCatalog's destination_sync_mode)
WRITE_MODES = ("overwrite", "overwrite_dedup", "append", "append_dedup")
_KNOWN_KEYS = ("name", "namespace", "json_schema", "supported_sync_modes", "source_defined_primary_key",
               "default_cursor_field", "cursor_candidates", "selected", "sync_mode", "cursor_field",
               "cursor_lookback", "primary_key", "skip_initial_load", "row_filter", "transform", "x-olake")
# olake types whose values the source orders and that can serve as an incremental cursor
TEMPORAL_CURSOR_TYPES = ("date", "timestamp", "timestamptz", "datetime_ms")
NUMERIC_CURSOR_TYPES = ("int16", "int32", "int64", "float32", "float64", "numeric", "decimal128")
ORDERED_CURSOR_TYPES = ("objectid",)  # ordered, but no look-back window can be subtracted
_INTERVAL = re.compile(r"\s*(\d+(\.\d+)?\s*(microsecond|millisecond|second|minute|hour|day|week|month|year)s?\s*)+",
                       re.IGNORECASE)


def is_cursor_type(olake_type: str) -> bool:
    """Whether a column of this olake type can be an incremental cursor (its values are ordered)."""
    return (olake_type in TEMPORAL_CURSOR_TYPES or olake_type in ORDERED_CURSOR_TYPES
            or is_numeric_cursor_type(olake_type))


def is_numeric_cursor_type(olake_type: str) -> bool:
    """Whether this olake type is a number (its look-back window is a number, not an interval)."""
    return olake_type in NUMERIC_CURSOR_TYPES or olake_type.startswith("decimal(")


@dataclass
class CatalogStream:
    """One stream of the catalog: what discover found plus the user's choices."""

    name: str
    namespace: str | None
    json_schema: dict
    supported_sync_modes: list[str] = field(default_factory=list)
    source_defined_primary_key: list[list[str]] = field(default_factory=list)
    default_cursor_field: list[str] = field(default_factory=list)
    cursor_candidates: list[str] | None = None
    selected: bool = True
    sync_mode: str = "full_refresh"
    cursor_field: list[str] | None = None
    cursor_lookback: str | int | float | None = None  # incremental: each pass reads from saved - lookback
    primary_key: list[list[str]] | None = None
    skip_initial_load: bool = False  # cdc: start at the current position, no full load
    row_filter: str | None = None  # "module:function" (core.row_hooks)
    transform: str | None = None  # "module:function" (core.row_hooks)
    x_olake: dict = field(default_factory=dict)
    additional: dict = field(default_factory=dict)  # Airbyte and "x-" keys (schema): written back unchanged

    @property
    def key(self) -> tuple[str | None, str]:
        """(namespace, name): how streams are matched with state and records."""
        return (self.namespace, self.name)

    @property
    def label(self) -> str:
        """``namespace.name`` (or ``name``) for messages."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    @property
    def columns(self) -> list[str]:
        """Top-level column names, in json_schema order."""
        return list(self.json_schema.get("properties", {}) or {})

    @property
    def olake_types(self) -> dict[str, str]:
        """Column name -> x-olake-type ("" for a column without one)."""
        properties = self.json_schema.get("properties", {})
        return {name: (prop or {}).get("x-olake-type") or "" for name, prop in properties.items()}

    @property
    def primary_key_columns(self) -> list[str]:
        """The user's primary key if given, else the discovered one, as top-level column names."""
        paths = self.primary_key if self.primary_key is not None else self.source_defined_primary_key
        return [path[0] for path in paths if path]

    @property
    def effective_cursor_field(self) -> list[str]:
        """The user's cursor_field if given, else default_cursor_field."""
        return list(self.cursor_field) if self.cursor_field else list(self.default_cursor_field)

    @property
    def cursor_column(self) -> str | None:
        """Top-level column of the cursor, or None."""
        cursor = self.effective_cursor_field
        return cursor[0] if cursor else None

    @classmethod
    def from_dict(cls, obj: dict) -> CatalogStream:
        """Build from one (already schema-validated) catalog entry, filling defaults."""
        cursor = obj.get("cursor_field")
        return cls(
            name=obj["name"], namespace=obj.get("namespace"), json_schema=obj["json_schema"],
            supported_sync_modes=list(obj.get("supported_sync_modes", [])),
            source_defined_primary_key=[list(p) for p in obj.get("source_defined_primary_key", [])],
            default_cursor_field=list(obj.get("default_cursor_field", [])),
            cursor_candidates=obj.get("cursor_candidates"),
            selected=obj.get("selected", True),
            sync_mode=obj.get("sync_mode", "full_refresh"),
            cursor_field=[cursor] if isinstance(cursor, str) else cursor,
            cursor_lookback=obj.get("cursor_lookback"),
            primary_key=obj.get("primary_key"),
            skip_initial_load=bool(obj.get("skip_initial_load", False)),
            row_filter=obj.get("row_filter"), transform=obj.get("transform"),
            x_olake=dict(obj.get("x-olake", {})),
            additional={k: v for k, v in obj.items() if k not in _KNOWN_KEYS},
        )

    def to_dict(self) -> dict:
        """The catalog entry as JSON-ready dict (Airbyte field names)."""
        out: dict[str, Any] = {
            "name": self.name, "namespace": self.namespace, "json_schema": self.json_schema,
            "supported_sync_modes": list(self.supported_sync_modes),
            "source_defined_primary_key": [list(p) for p in self.source_defined_primary_key],
            "default_cursor_field": list(self.default_cursor_field),
        }
        if self.cursor_candidates is not None:
            out["cursor_candidates"] = list(self.cursor_candidates)
        out["selected"] = self.selected
        out["sync_mode"] = self.sync_mode
        if self.cursor_field is not None:
            out["cursor_field"] = list(self.cursor_field)
        if self.cursor_lookback is not None:
            out["cursor_lookback"] = self.cursor_lookback
        if self.primary_key is not None:
            out["primary_key"] = [list(p) for p in self.primary_key]
        if self.skip_initial_load:
            out["skip_initial_load"] = True
        for name in ("row_filter", "transform"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.x_olake:
            out["x-olake"] = self.x_olake
        out.update(self.additional)
        return copy.deepcopy(out)


@dataclass
class Catalog:
    """All streams of a catalog, in file order."""

    streams: list[CatalogStream] = field(default_factory=list)
    new_streams: str = "ignore"  # following: what a stream found later gets (``core.live_discovery``)

    def selected_streams(self) -> list[CatalogStream]:
        """The streams to copy."""
        return [s for s in self.streams if s.selected]

    def find(self, namespace: str | None, name: str) -> CatalogStream | None:
        """The stream with this namespace and name, or None."""
        for stream in self.streams:
            if stream.namespace == namespace and stream.name == name:
                return stream
        return None

    def to_dict(self) -> dict:
        """The bare catalog object ``{"streams": [...]}``."""
        out: dict[str, Any] = {"streams": [s.to_dict() for s in self.streams]}
        if self.new_streams != "ignore":
            out["new_streams"] = self.new_streams
        return out


def parse_catalog(obj: Any, what: str = "catalog") -> Catalog:
    """Validate and build a Catalog from the bare object or a CATALOG message; CatalogError if wrong."""
    if isinstance(obj, dict) and obj.get("type") == "CATALOG" and "catalog" in obj:
        obj = obj["catalog"]
    validate(obj, "catalog", what, CatalogError)
    catalog = Catalog([CatalogStream.from_dict(olake_entry(flat_entry(entry))) for entry in obj["streams"]],
                      obj.get("new_streams", "ignore"))
    seen: set[tuple[str | None, str]] = set()
    for stream in catalog.streams:
        if stream.key in seen:
            raise CatalogError(f"{what}: stream '{stream.label}' appears more than once")
        seen.add(stream.key)
        if stream.selected:
            _check_stream_choices(stream, what)
    return catalog


def flat_entry(entry: dict) -> dict:
    """A catalog entry in olake's flat form: an Airbyte ConfiguredCatalog entry (``{"stream": {...},
    "sync_mode": ...}``) becomes its stream's fields, the choices beside it winning."""
    if "stream" not in entry:
        return entry
    choices = {k: v for k, v in entry.items() if k != "stream"}
    return {**entry["stream"], **choices}


def _check_stream_choices(stream: CatalogStream, what: str) -> None:
    where = f"{what}: stream '{stream.label}'"
    modes = stream.supported_sync_modes
    if modes and stream.sync_mode not in modes:
        raise CatalogError(f"{where}: sync_mode '{stream.sync_mode}' is not supported "
                           f"(supported: {', '.join(modes)})")
    if is_plain(stream.json_schema) or is_derived(stream.json_schema):
        _check_write_mode(stream, where)  # an Airbyte source's stream, as ``write`` applies it
    columns = set(stream.columns)
    if stream.skip_initial_load and stream.sync_mode != "cdc":
        raise CatalogError(f"{where}: skip_initial_load applies to sync_mode 'cdc' only")
    if stream.sync_mode == "incremental":
        cursor = stream.effective_cursor_field
        if not cursor:
            raise CatalogError(f"{where}: sync_mode 'incremental' needs a cursor_field")
        if len(cursor) > 1:
            raise CatalogError(f"{where}: nested cursor_field {cursor} is not supported; "
                               "use a top-level column")
        if cursor[0] not in columns:
            raise CatalogError(f"{where}: cursor_field '{cursor[0]}' is not a column of the stream")
        _check_cursor_type(stream, where)
    if stream.primary_key is not None and "properties" in stream.json_schema:
        unknown = [c for c in stream.primary_key_columns if c not in columns]
        if unknown:
            raise CatalogError(f"{where}: primary_key column '{unknown[0]}' is not a column of the stream")


def _check_write_mode(stream: CatalogStream, where: str) -> None:
    mode = stream.additional.get("destination_sync_mode")
    if mode is not None and mode not in WRITE_MODES:
        raise CatalogError(f"{where}: destination_sync_mode '{mode}' is not one of {', '.join(WRITE_MODES)}")
    if mode in ("append_dedup", "overwrite_dedup") and not stream.primary_key_columns:
        raise CatalogError(f"{where}: destination_sync_mode '{mode}' needs a primary_key (or a "
                           f"source_defined_primary_key) to deduplicate by")


def write_mode(stream: CatalogStream) -> str:
    """How ``write`` applies an Airbyte source's stream: its destination_sync_mode, else ``overwrite`` for a
    full_refresh stream, ``append_dedup`` for an incremental one with a primary key, ``append`` without."""
    mode = stream.additional.get("destination_sync_mode")
    if mode is not None:
        return mode
    if stream.sync_mode == "full_refresh":
        return "overwrite"
    return "append_dedup" if stream.primary_key_columns else "append"


def with_airbyte_types(catalog: Catalog) -> Catalog:
    """``catalog`` with each stream whose json_schema has no ``x-olake-type`` (an Airbyte source's) typed
    from its JSON Schema (``codec.airbyte_types``); such a stream written with ``append`` keeps every
    record, so it has no key."""
    streams = []
    for stream in catalog.streams:
        if is_plain(stream.json_schema):
            if not stream.json_schema.get("properties") and stream.selected:
                raise CatalogError(f"catalog: stream '{stream.label}': its json_schema lists no properties; "
                                   f"olake writes the columns a stream's schema lists")
            stream = copy.deepcopy(stream)
            if write_mode(stream) == "append":
                stream.primary_key = []
            stream.json_schema = with_derived_types(stream.json_schema, stream.primary_key_columns)
        streams.append(stream)
    return Catalog(streams, catalog.new_streams)


def _check_cursor_type(stream: CatalogStream, where: str) -> None:
    """The cursor column's type orders its values, and the look-back window fits that type."""
    column = stream.cursor_column
    olake_type = (stream.json_schema["properties"][column] or {}).get("x-olake-type")
    if olake_type is not None:
        check_cursor_column(where, column, olake_type, stream.cursor_lookback)


def check_cursor_column(where: str, column: str, olake_type: str, lookback: Any) -> None:
    """CatalogError unless ``olake_type`` can be a cursor and ``lookback`` (if any) suits it."""
    if not is_cursor_type(olake_type):
        raise CatalogError(f"{where}: cursor_field '{column}' has type {olake_type}, whose values cannot be "
                           f"ordered; choose a number, date or timestamp column")
    if lookback is None:
        return
    if olake_type in ORDERED_CURSOR_TYPES:
        raise CatalogError(f"{where}: cursor_lookback cannot apply to the {olake_type} cursor '{column}'; "
                           f"remove it")
    if is_numeric_cursor_type(olake_type):
        if isinstance(lookback, bool) or not isinstance(lookback, (int, float)) or lookback < 0:
            raise CatalogError(f"{where}: cursor_lookback {lookback!r} must be a non-negative number for "
                               f"the {olake_type} cursor '{column}'")
    elif not isinstance(lookback, str) or not _INTERVAL.fullmatch(lookback):
        raise CatalogError(f"{where}: cursor_lookback {lookback!r} must be an interval such as "
                           f"'10 minutes' for the {olake_type} cursor '{column}'")


def load_catalog(path: str | Path) -> Catalog:
    """Read and check a catalog file (bare catalog, a CATALOG message, or discover's JSON-lines output)."""
    try:
        obj = load_json_file(path, "catalog", CatalogError)
    except CatalogError:
        obj = _catalog_message_from_json_lines(path)
        if obj is None:
            raise
    return parse_catalog(obj, what=str(path))


def _catalog_message_from_json_lines(path: str | Path) -> dict | None:
    """The last CATALOG message of a JSON-lines file (discover output with LOG lines), or None."""
    found = None
    try:
        for line in Path(path).read_text(encoding="utf-8-sig").splitlines():
            if line.strip():
                msg = json.loads(line)
                if isinstance(msg, dict) and msg.get("type") == "CATALOG":
                    found = msg
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return found
