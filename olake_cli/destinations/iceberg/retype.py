"""Column types Iceberg cannot promote, replaced when a new load replaces a table's contents.

Iceberg only promotes int -> long, float -> double and a decimal's precision. A stream whose catalog
gives a column another type (a MongoDB field whose values drifted to ``bson`` or ``float64``, a
catalog edited after a type change at the source) is loaded anew by the read pipeline. Until that load
is complete its rows are written under a *replacement* schema: the table's schema with each such
column replaced by a new field (fresh field ids, the new type, same name and place). The commit that
swaps the new load in makes that schema current in the same metadata update, so readers see the old
rows with the old types until the new rows replace them in one snapshot. An empty table takes the new
schema at once. A replaced column cannot be a partition source.
"""

from __future__ import annotations

import itertools
from typing import Any

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (AddSchemaUpdate, AssertCurrentSchemaId, SetCurrentSchemaUpdate,
                                    update_table_metadata)
from pyiceberg.types import NestedField

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.contracts import CommitBatch
from olake_cli.core.errors import DestinationError
from olake_cli.destinations.iceberg.schema import check_evolution, stream_iceberg_schema


def replaced_columns(table: Table, stream: CatalogStream) -> list[str]:
    """The table's columns whose type cannot become the stream's (Iceberg has no such promotion)."""
    current, wanted = table.schema(), stream_iceberg_schema(stream)
    replaced = []
    for field in wanted.fields:
        have = next((f for f in current.fields if f.name == field.name), None)
        if have is None:
            continue
        try:
            check_evolution(Schema(have), Schema(field), stream.label)
        except DestinationError:
            replaced.append(field.name)
    return replaced


def replacement(table: Table, stream: CatalogStream, replaced: list[str]) -> TableMetadata:
    """The table's metadata with the ``replaced`` columns as new fields of the stream's types (not
    committed: the schema rows of the coming load are written with)."""
    metadata = table.metadata
    current, wanted = metadata.schema(), stream_iceberg_schema(stream)
    sources = {field.source_id for field in metadata.spec().fields}
    counter = itertools.count(metadata.last_column_id + 1)
    fields = []
    for field in current.fields:
        if field.name not in replaced:
            fields.append(field)
            continue
        if field.field_id in sources:
            raise DestinationError(f"iceberg: {stream.label}: column '{field.name}' partitions the table and "
                                   f"cannot change its type from {field.field_type} to "
                                   f"{wanted.find_field(field.name).field_type}")
        fresh = assign_fresh_schema_ids(Schema(wanted.find_field(field.name)), lambda: next(counter))
        fields.append(NestedField(fresh.fields[0].field_id, field.name, fresh.fields[0].field_type, required=False))
    kept_ids = {field.field_id for field in fields}
    schema = Schema(*fields, schema_id=max(s.schema_id for s in metadata.schemas) + 1,
                    identifier_field_ids=[i for i in current.identifier_field_ids if i in kept_ids])
    return update_table_metadata(metadata, _updates(schema))


def check_pending_rows(target: Any, batch: CommitBatch) -> None:
    """A DestinationError, before anything is committed, when rows other than a new load's arrive while
    columns wait to change type (``target``: an IcebergStream with a pending ``replacement``)."""
    new_load = batch.new_load or (target.staged or {}).get("load_id") == batch.load_id
    rows = batch.load is not None or bool(target.written) or batch.truncated
    if batch.changes is None and (new_load or not rows):
        return
    before = {f.name: f for f in target.table.schema().fields}
    changes = ", ".join(f"'{f.name}' {before[f.name].field_type} -> {f.field_type}"
                        for f in target.replacement.schema().fields
                        if f.name in before and before[f.name].field_id != f.field_id)
    raise DestinationError(f"iceberg: {target.stream.label}: column type change(s) Iceberg cannot make in place: "
                           f"{changes}; only a new load of the stream can bring rows of the new type (a "
                           f"catalog whose column type changed loads the stream anew); nothing was committed")


def make_current(txn: Transaction, metadata: TableMetadata) -> None:
    """Make the replacement schema of ``metadata`` current in ``txn`` (the commit swapping a load in)."""
    current = AssertCurrentSchemaId(current_schema_id=txn.table_metadata.current_schema_id)
    txn._apply(_updates(metadata.schema()), (current,))


def replace_now(table: Table, metadata: TableMetadata) -> Table:
    """Commit the replacement schema at once (a table without rows)."""
    txn = table.transaction()
    make_current(txn, metadata)
    return txn.commit_transaction()


def _updates(schema: Schema) -> tuple:
    return (AddSchemaUpdate(schema=schema), SetCurrentSchemaUpdate(schema_id=-1))
