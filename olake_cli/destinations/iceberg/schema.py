"""Iceberg schemas of streams: exact types, the ``_olake_*`` columns, partition specs, evolution.

A stream's columns take the Arrow types of ``core.codec.types`` and map to Iceberg types one to one:
int16/int32 -> int, int64 -> long, float32 -> float, float64 -> double, decimal(p,s), date, time,
timestamp and timestamptz (microseconds; BSON ``datetime_ms`` becomes timestamptz), uuid, binary,
string (also ``json``/``bson`` text, ``numeric`` text, ObjectId and Decimal128 text), structs
(MongoDB documents, PostgreSQL intervals) and lists. Every column is optional: a delete carries only
the key. Schema evolution follows Iceberg's rules: new columns are added; int -> long, float ->
double and decimal(p,s) -> decimal(p2,s) with p2 > p are promoted; a catalog type the table's column
was promoted from (a column widened during change capture, then a run with the original catalog)
keeps the wider column and its values are cast to it (so does a column converted by value: a decimal
of a larger scale, decimal text, see rewrite.py); anything else fails naming the column before
anything is committed.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog as IcebergCatalog
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.transforms import (BucketTransform, DayTransform, HourTransform, IdentityTransform,
                                  MonthTransform, TruncateTransform, VoidTransform, YearTransform)
from pyiceberg.types import (DecimalType, DoubleType, FloatType, IcebergType, IntegerType, ListType,
                             LongType, StringType, StructType)

from olake_cli.core.codec.types import arrow_schema
from olake_cli.core.catalog import CatalogStream
from olake_cli.core.errors import DestinationError
from olake_cli.destinations.iceberg.config import PartitionField

METADATA_FIELDS = [
    pa.field("_olake_op", pa.string()),                          # r (load or incremental), c, u, d
    pa.field("_olake_op_id", pa.string()),                       # 32 hex digits; text order = op order
    pa.field("_olake_commit_ts", pa.timestamp("us", tz="UTC")),  # source commit time (changes only)
    pa.field("_olake_synced_at", pa.timestamp("us", tz="UTC")),  # when olake wrote the row
]
METADATA_NAMES = tuple(f.name for f in METADATA_FIELDS)
_TRANSFORMS = {"identity": IdentityTransform, "year": YearTransform, "month": MonthTransform,
               "day": DayTransform, "hour": HourTransform, "void": VoidTransform}


def plain_type(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with JSON extension types replaced by text (Iceberg has no JSON type)."""
    if isinstance(arrow_type, pa.JsonType):
        return pa.string()
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(plain_type(f.type)).with_nullable(True) for f in arrow_type])
    if pa.types.is_list(arrow_type):
        return pa.list_(pa.field("element", plain_type(arrow_type.value_type)))
    return arrow_type


def stream_arrow_schema(stream: CatalogStream) -> pa.Schema:
    """The Arrow schema a stream's table is created from: its columns (optional), then _olake_*."""
    fields = [pa.field(f.name, plain_type(f.type)) for f in arrow_schema(stream.json_schema)]
    return pa.schema(fields + METADATA_FIELDS)


def stream_iceberg_schema(stream: CatalogStream) -> Schema:
    """The Iceberg schema (fresh field ids) of a stream's table."""
    return assign_fresh_schema_ids(IcebergCatalog._convert_schema_if_needed(stream_arrow_schema(stream)))


def partition_spec(schema: Schema, fields: list[PartitionField], label: str) -> PartitionSpec:
    """The partition spec of the configured fields (a DestinationError names an unknown column)."""
    spec_fields = []
    for index, item in enumerate(fields):
        try:
            source = schema.find_field(item.column)
        except ValueError:
            raise DestinationError(f"iceberg: {label}: partition column '{item.column}' is not a column "
                                   f"of the stream") from None
        name, _, arg = item.transform.partition("[")
        transform = (BucketTransform(int(arg[:-1])) if name == "bucket" else
                     TruncateTransform(int(arg[:-1])) if name == "truncate" else _TRANSFORMS[name]())
        if not transform.can_transform(source.field_type):
            raise DestinationError(f"iceberg: {label}: cannot partition column '{item.column}' "
                                   f"({source.field_type}) by {item.transform}")
        suffix = "" if name == "identity" else f"_{name}"
        spec_fields.append(IcebergPartitionField(source_id=source.field_id, field_id=1000 + index,
                                                 transform=transform, name=f"{item.column}{suffix}"))
    return PartitionSpec(*spec_fields)


def check_evolution(current: Schema, wanted: Schema, label: str) -> bool:
    """Whether ``current`` must change to hold ``wanted`` (added or promoted columns).

    Raises a DestinationError naming the first column whose type Iceberg cannot change that way.
    """
    return _struct_changes(current.as_struct(), wanted.as_struct(), label, "")


def _struct_changes(current: StructType, wanted: StructType, label: str, prefix: str) -> bool:
    changed = False
    existing = {f.name: f for f in current.fields}
    for field in wanted.fields:
        have = existing.get(field.name)
        if have is None:
            changed = True
        else:
            changed |= _type_changes(have.field_type, field.field_type, label, f"{prefix}{field.name}")
    return changed


def _type_changes(have: IcebergType, want: IcebergType, label: str, column: str) -> bool:
    if have == want:
        return False
    if isinstance(have, StructType) and isinstance(want, StructType):
        return _struct_changes(have, want, label, f"{column}.")
    if isinstance(have, ListType) and isinstance(want, ListType):
        return _type_changes(have.element_type, want.element_type, label, f"{column}[]")
    if _promotes(have, want):
        return True
    if _promotes(want, have) or converts_by_value(want, have):
        return False  # a catalog narrower than the table (widened earlier): the wider column holds every value
    raise DestinationError(f"iceberg: {label}: column '{column}' is {have} in the table and cannot "
                           f"become {want} (Iceberg allows int -> long, float -> double and a wider "
                           f"decimal precision with the same scale); nothing was committed")


def _promotes(narrow: IcebergType, wide: IcebergType) -> bool:
    """Whether Iceberg promotes ``narrow`` to ``wide`` in place (every value kept exactly)."""
    if isinstance(narrow, IntegerType) and isinstance(wide, LongType):
        return True
    if isinstance(narrow, FloatType) and isinstance(wide, DoubleType):
        return True
    return isinstance(narrow, DecimalType) and isinstance(wide, DecimalType) and narrow.scale == wide.scale \
        and narrow.precision < wide.precision


def converts_by_value(have: IcebergType, want: IcebergType) -> bool:
    """Whether values of type ``have`` convert to type ``want``, which Iceberg cannot promote ``have`` to,
    value by value: a decimal into one of a larger scale (it fails on a value with more integer digits
    than ``want`` keeps) or into decimal text, also as list elements and struct fields (see rewrite.py)."""
    if isinstance(have, ListType) and isinstance(want, ListType):
        return _same_or_converts(have.element_type, want.element_type)
    if isinstance(have, StructType) and isinstance(want, StructType):
        fields = {f.name: f.field_type for f in have.fields}
        return fields.keys() == {f.name for f in want.fields} \
            and all(_same_or_converts(fields[f.name], f.field_type) for f in want.fields)
    if isinstance(have, DecimalType):
        return isinstance(want, StringType) or isinstance(want, DecimalType) and want.scale > have.scale
    return False


def _same_or_converts(have: IcebergType, want: IcebergType) -> bool:
    if isinstance(have, (ListType, StructType)):
        return converts_by_value(have, want)  # (the same shape and types, field ids aside, too)
    return have == want or converts_by_value(have, want)


def table_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of a table's data files (with Parquet field ids)."""
    return schema_to_pyarrow(schema, include_field_ids=True)


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """``table`` cast to the table's Arrow schema ``target``: columns by name (missing ones null),
    JSON text as strings, int16 -> int32, ms timestamps -> us, narrower numbers widened."""
    columns = []
    for field in target:
        if field.name in table.column_names:
            column = table.column(field.name)
            chunks = [conform_array(chunk, field.type) for chunk in column.chunks]
            columns.append(pa.chunked_array(chunks, type=field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=target)


def conform_array(array: pa.Array, target: pa.DataType) -> pa.Array:
    """One array cast to ``target`` (recursively through structs and lists)."""
    if isinstance(array.type, pa.JsonType):
        array = array.storage
    if array.type == target:
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(array.type):
        names = [array.type.field(i).name for i in range(array.type.num_fields)]
        children = [conform_array(array.field(names.index(f.name)), f.type) if f.name in names
                    else pa.nulls(len(array), f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if pa.types.is_list(target) and (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)):
        offsets = array.offsets  # of a slice: they start where its first list does
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        values = conform_array(array.values.slice(first, last - first), target.value_type)
        offsets = pc.subtract(offsets, first) if first else offsets
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=array.is_null())
    try:
        return array.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DestinationError(f"iceberg: cannot store {array.type} values as {target}: {exc}") from None
