"""Creating, checking and reading the olake properties of one stream's Iceberg table.

olake keeps its progress in table properties, written in the same metadata commit as the data
they cover (one atomic swap of the table's metadata):

* ``olake.state``: the stream state (JSON) committed with the table's contents;
* ``olake.max-op-id``: the highest operation id applied (32 hex digits); changes at or below it
  are replays and are skipped;
* ``olake.staged-load``: a load that will replace the table when its last chunk commits (JSON:
  ``load_id`` and its data files, not yet part of the table).

A new table's location is chosen here, not by the catalog's own convention, because that one pastes
the raw names into a path (``../../x`` would leave the warehouse): each name becomes one encoded path
component (``core.path_names``). An existing table keeps the location its catalog entry holds.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import DestinationError
from olake_cli.core.path_names import encode_name
from olake_cli.destinations.iceberg.config import IcebergConfig, redact
from olake_cli.destinations.iceberg.schema import (check_evolution, partition_spec, stream_arrow_schema,
                                                   stream_iceberg_schema)

PROP_STATE, PROP_MAX_OP, PROP_STAGED = "olake.state", "olake.max-op-id", "olake.staged-load"
CREATE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}
HIVE_STYLE_CATALOGS = ("hive", "glue", "dynamodb")  # their warehouse folders are ``<namespace>.db``


def load_table(catalog: Any, identifier: tuple[str, str]) -> Table | None:
    """The table, or None when it does not exist."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def check_table(table: Table | None, stream: CatalogStream, replaced: list[str] = ()) -> bool:
    """Whether an existing table must gain or widen columns (a DestinationError if it cannot), the
    ``replaced`` columns aside (their type changes with a new load, see retype.py)."""
    if table is None:
        return False
    wanted = [f for f in stream_iceberg_schema(stream).fields if f.name not in replaced]
    return check_evolution(table.schema(), Schema(*wanted), stream.label)


def create_table(catalog: Any, cfg: IcebergConfig, identifier: tuple[str, str], stream: CatalogStream) -> Table:
    """Create the stream's table (and its namespace) from the catalog schema."""
    schema = stream_iceberg_schema(stream)
    spec = partition_spec(schema, cfg.partition_fields(stream.namespace, stream.name), stream.label)
    codec_name = "uncompressed" if cfg.compression == "none" else cfg.compression
    properties = {**CREATE_PROPERTIES, "write.parquet.compression-codec": codec_name}
    try:
        try:
            catalog.create_namespace(identifier[0])
        except NamespaceAlreadyExistsError:
            pass
        return catalog.create_table(identifier, schema=schema, partition_spec=spec, properties=properties,
                                    location=new_table_location(catalog, cfg, identifier))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)
    except OSError as exc:
        raise DestinationError(f"iceberg: cannot create table {'.'.join(identifier)}: "
                               f"{exc.strerror or exc}") from None
    except Exception as exc:  # catalog errors come in many types
        raise DestinationError(f"iceberg: cannot create table {'.'.join(identifier)}: "
                               f"{redact(str(exc), cfg)}") from None


def new_table_location(catalog: Any, cfg: IcebergConfig, identifier: tuple[str, str]) -> str | None:
    """Where a new table goes: ``<namespace location>/<table>``, else ``<warehouse>/<namespace>/<table>``
    (``<namespace>.db`` in Hive-style catalogs), names encoded; None where the catalog's server decides
    (REST)."""
    if not isinstance(catalog, MetastoreCatalog):
        return None
    namespace, table = identifier
    base = catalog.load_namespace_properties(namespace).get("location")
    if not base:
        warehouse = catalog.properties.get("warehouse")
        if not warehouse:
            return None  # the catalog refuses the table itself, with its own message
        suffix = ".db" if cfg.catalog_type.lower() in HIVE_STYLE_CATALOGS else ""
        base = f"{warehouse.rstrip('/')}/{encode_name(namespace)}{suffix}"
    return f"{base.rstrip('/')}/{encode_name(table)}"


def evolve_table(table: Table, stream: CatalogStream, replaced: list[str] = ()) -> Table:
    """Add the stream's new columns and promote widened ones, the ``replaced`` columns aside (checked
    by ``check_table`` first)."""
    with table.update_schema() as update:
        update.union_by_name(pa.schema([f for f in stream_arrow_schema(stream) if f.name not in replaced]))
    return table


def olake_properties(table: Table) -> tuple[dict | None, str | None, dict | None]:
    """(committed stream state, highest applied operation id, staged load) of a table."""
    props = table.properties
    state = _json(props.get(PROP_STATE), table, PROP_STATE)
    staged = _json(props.get(PROP_STAGED), table, PROP_STAGED)
    return state, props.get(PROP_MAX_OP) or None, staged


def _json(text: str | None, table: Table, key: str) -> Any:
    if not text:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise DestinationError(f"iceberg: table {'.'.join(table.name())} has an unreadable '{key}' "
                               f"property") from None


def has_rows(table: Table) -> bool:
    """Whether the table's current snapshot holds any data row."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return False
    summary = snapshot.summary or {}
    total = summary.get("total-records")
    return total is None or int(total) > 0


def dumps(value: Any) -> str:
    """A property value as compact JSON text."""
    return orjson.dumps(value).decode()
