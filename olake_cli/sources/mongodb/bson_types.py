"""MongoDB documents as Arrow record batches, typed by the stream's catalog (``bson_wire`` gives
their RECORD wire values, the same values with the same errors).

Each field's x-olake-type (inferred by ``bson_schema.infer_json_schema``) fixes what it holds (the
scalar types are in ``bson_scalars``, the errors in ``bson_misfits``):

    bool, int32, string            the BSON bool, int (Int32), string, exactly
    int64                          BSON long (Int64); an Int32 value widens exactly
    float64                        BSON double; an int or long that is exactly a double widens
    objectid                       str(ObjectId) (24 lowercase hex digits)
    decimal128                     str(Decimal128); an int or long as its digits, a double as the
                                   shortest text that reads back as it ("0.1", "1E+300", "NaN")
    datetime_ms                    BSON date: milliseconds since 1970 (DatetimeMS or datetime)
    bytes, uuid                    Binary subtype 0; subtype 4 of 16 bytes (or uuid.UUID)
    bson                           any value, as canonical Extended JSON text (``bson_ejson``:
                                   CANONICAL_JSON_OPTIONS with uuid.UUID written as subtype 4)
    document, array<T>             a struct of the property's sub-fields / a list of T

A missing field, or sub-field, is null (a non-nullable ``bson`` ``_id`` holds the text ``null``).
A value that does not fit its field's type, or a field (or sub-field) the json_schema lacks, raises
a SourceError naming the stream, the field and the document's ``_id``: nothing is dropped or
converted silently. Extended JSON cannot tell a document whose field names are its own type markers
(``{"$date": 5}``) from the typed value, so such a ``bson`` value (checked only when a field name
starts with '$') raises too.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping

import pyarrow as pa

from olake_cli.core.codec.types import (
    arrow_schema, element_property, field_arrow_type, olake_type_of, sub_properties,
)
from olake_cli.sources.mongodb.bson_ejson import ejson_text
from olake_cli.sources.mongodb.bson_misfits import FieldMisfit, misfit, no_value, source_error, unknown_field
from olake_cli.sources.mongodb.bson_scalars import Scalar, scalar_of
from olake_cli.sources.mongodb.bson_schema import as_bson_document

_NONE = type(None)


def documents_to_batch(documents: list, json_schema: dict, stream_label: str) -> pa.RecordBatch:
    """BSON documents as a record batch of exactly ``arrow_schema(json_schema)``.

    A missing field is null; a value that does not fit its field's x-olake-type, or a field the
    json_schema lacks, raises a SourceError naming ``stream_label``, the field and the ``_id``.
    """
    docs = [d if type(d) is dict else as_bson_document(d) for d in documents]
    properties = json_schema.get("properties", {})
    schema = arrow_schema(json_schema)
    known = frozenset(properties)
    arrays = []
    try:
        for index, doc in enumerate(docs):
            if not known.issuperset(doc):
                raise unknown_field(index, "", doc, known)
        for field in schema:
            name = field.name
            arrays.append(_column([d.get(name) for d in docs], properties[name], name, field.nullable))
    except FieldMisfit as bad:
        raise source_error(stream_label, docs[bad.index], bad) from None
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(values: list, prop: dict, path: str, nullable: bool) -> pa.Array:
    olake_type = olake_type_of(prop, path)
    if olake_type == "bson":
        null = None if nullable else "null"
        texts = [null if v is None else ejson_text(v, i, path) for i, v in enumerate(values)]
        return pa.ExtensionArray.from_storage(pa.json_(), pa.array(texts, type=pa.string()))
    if olake_type == "document":
        array = _document_column(values, prop, path)
    elif olake_type.startswith("array<"):
        array = _list_column(values, prop, olake_type, path)
    else:
        array = _scalar_column(values, olake_type, path)
    if not nullable and array.null_count:
        raise no_value(values.index(None), path)
    return array


def _scalar_column(values: list, olake_type: str, path: str) -> pa.Array:
    spec = scalar_of(olake_type, path)
    present = set(map(type, values))
    present.discard(_NONE)
    if not present <= spec.fast:
        _raise_first_misfit(values, spec, olake_type, path)
    converted = values if spec.to_arrow is None else \
        [None if v is None else spec.to_arrow(v) for v in values]
    try:
        return spec.build(converted)
    except (OverflowError, pa.ArrowInvalid):
        _raise_first_misfit(values, spec, olake_type, path)
        raise


def _raise_first_misfit(values: list, spec: Scalar, olake_type: str, path: str) -> None:
    for index, value in enumerate(values):
        if value is not None and not spec.fits(value):
            raise misfit(index, path, value, olake_type)


def _document_column(values: list, prop: dict, path: str) -> pa.Array:
    properties = sub_properties(prop, path)
    known = frozenset(properties)
    valid = [value is not None for value in values]
    for index, value in enumerate(values):
        if value is not None:
            if not isinstance(value, Mapping):
                raise misfit(index, path, value, "document")
            if not known.issuperset(value):
                raise unknown_field(index, path, value, known)
    struct_type = field_arrow_type(prop, path)
    children = []
    for field, (name, sub) in zip(struct_type, properties.items()):
        sub_values = [None if v is None else v.get(name) for v in values]
        children.append(_column(sub_values, sub, f"{path}.{name}", True))
        if not field.nullable:
            for index, (ok, sub_value) in enumerate(zip(valid, sub_values)):
                if ok and sub_value is None:
                    raise no_value(index, f"{path}.{name}")
    mask = None if all(valid) else pa.array([not ok for ok in valid], pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(struct_type), mask=mask)


def _list_column(values: list, prop: dict, olake_type: str, path: str) -> pa.Array:
    offsets, flat, nulls = [0], [], []
    for index, value in enumerate(values):
        if value is not None and type(value) not in (list, tuple):
            raise misfit(index, path, value, olake_type)
        nulls.append(value is None)
        if value is not None:
            flat.extend(value)
        offsets.append(len(flat))
    try:
        elements = _column(flat, element_property(prop, olake_type), f"{path}[]", True)
    except FieldMisfit as bad:
        raise FieldMisfit(bisect_right(offsets, bad.index) - 1, bad.path, bad.detail) from None
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), elements,
                                    type=field_arrow_type(prop, path), mask=mask)
