"""MongoDB documents as RECORD wire values, field by field as the stream's catalog types them (the
change stream's path: one document at a time; full loads build Arrow batches, see ``bson_types``).

The same values and the same errors as ``bson_types.documents_to_batch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olake_cli.core.codec.types import element_property, nullable, olake_type_of, sub_properties
from olake_cli.sources.mongodb.bson_ejson import ejson_text
from olake_cli.sources.mongodb.bson_misfits import FieldMisfit, misfit, no_value, source_error, unknown_field
from olake_cli.sources.mongodb.bson_scalars import scalar_of
from olake_cli.sources.mongodb.bson_schema import as_bson_document


def document_to_wire(document: Mapping, json_schema: dict, stream_label: str) -> dict:
    """One document as its RECORD data (wire values), as ``encode_records`` gives that row.

    The same errors as ``documents_to_batch``.
    """
    doc = as_bson_document(document)
    properties = json_schema.get("properties", {})
    known = frozenset(properties)
    try:
        if not known.issuperset(doc):
            raise unknown_field(0, "", doc, known)
        return {name: _wire_value(doc.get(name), prop, name, nullable(prop))
                for name, prop in properties.items()}
    except FieldMisfit as bad:
        raise source_error(stream_label, doc, bad) from None


def _wire_value(value: Any, prop: dict, path: str, null_ok: bool) -> Any:
    olake_type = olake_type_of(prop, path)
    if value is None:
        if null_ok:
            return None
        if olake_type == "bson":
            return "null"
        raise no_value(0, path)
    if olake_type == "bson":
        return ejson_text(value, 0, path)
    if olake_type == "document":
        return _document_wire(value, prop, path)
    if olake_type.startswith("array<"):
        if type(value) not in (list, tuple):
            raise misfit(0, path, value, olake_type)
        element = element_property(prop, olake_type)
        return [_wire_value(item, element, f"{path}[]", True) for item in value]
    spec = scalar_of(olake_type, path)
    if not spec.fits(value):
        raise misfit(0, path, value, olake_type)
    return spec.to_wire(value)


def _document_wire(value: Any, prop: dict, path: str) -> dict:
    if not isinstance(value, Mapping):
        raise misfit(0, path, value, "document")
    properties = sub_properties(prop, path)
    known = frozenset(properties)
    if not known.issuperset(value):
        raise unknown_field(0, path, value, known)
    wire = {}
    for name, sub in properties.items():
        sub_value = value.get(name)
        if sub_value is None and not nullable(sub):
            raise no_value(0, f"{path}.{name}")
        wire[name] = _wire_value(sub_value, sub, f"{path}.{name}", True)
    return wire
