"""olake's destination Arrow types as Spark takes them: the two extension types become text.

Spark converts every other destination type itself (``int16`` -> ShortType, ``time`` -> TimeType,
``timestamp`` -> TimestampNTZType, ``interval`` and ``ndarray<T>`` -> structs, ...); it refuses
Arrow extension types, so ``uuid`` becomes its canonical text and ``json``/``bson`` their JSON text,
nested in lists and structs too.
"""

from __future__ import annotations

import uuid

import pyarrow as pa


def spark_type(arrow: pa.DataType) -> pa.DataType:
    """The Arrow type Spark is handed for a destination type."""
    if isinstance(arrow, pa.BaseExtensionType):
        return pa.string()
    if pa.types.is_list(arrow):
        return pa.list_(pa.field(arrow.value_field.name, spark_type(arrow.value_type), arrow.value_field.nullable))
    if pa.types.is_struct(arrow):
        return pa.struct([pa.field(f.name, spark_type(f.type), f.nullable) for f in arrow])
    return arrow


def spark_schema(schema: pa.Schema) -> pa.Schema:
    """``spark_type`` of every field."""
    return pa.schema([pa.field(f.name, spark_type(f.type), f.nullable) for f in schema])


def spark_batch(table: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """A destination table's rows as one record batch of ``target``, the Arrow schema Spark expects
    (``time`` in nanoseconds, lists' elements named ``item``, ...)."""
    if isinstance(table, pa.Table):
        table = table.combine_chunks()
        arrays = [column.chunk(0) if column.num_chunks else pa.array([], column.type) for column in table.columns]
    else:
        arrays = list(table.columns)
    converted = pa.Table.from_arrays([spark_array(a) for a in arrays], schema=spark_schema(table.schema))
    return converted.cast(target).combine_chunks().to_batches()[0]


def spark_array(array: pa.Array) -> pa.Array:
    """One array in its ``spark_type``."""
    kind = array.type
    if isinstance(kind, pa.UuidType):
        return pa.array([None if b is None else str(uuid.UUID(bytes=b)) for b in array.storage.to_pylist()],
                        pa.string())
    if isinstance(kind, pa.BaseExtensionType):
        return array.storage.cast(pa.string())
    if spark_type(kind) == kind:
        return array
    if pa.types.is_list(kind):
        values = spark_array(array.values)
        return pa.ListArray.from_arrays(array.offsets, values, type=spark_type(kind), mask=array.is_null())
    fields = [spark_array(array.field(i)) for i in range(kind.num_fields)]
    return pa.StructArray.from_arrays(fields, fields=list(spark_type(kind)), mask=array.is_null())
