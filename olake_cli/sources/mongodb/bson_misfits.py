"""A BSON value that does not fit its field's x-olake-type (``FieldMisfit``), the errors that say so,
and what the user can do about it (run discover again, or type the field ``bson``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olake_cli.core.codec.bad_value import BadValue, value_error
from olake_cli.core.errors import SourceError
from olake_cli.sources.mongodb.bson_schema import bson_type_name


class FieldMisfit(BadValue):
    """A value (of document ``index``) that does not fit the field at ``path``."""

    def __init__(self, index: int, path: str, detail: str) -> None:
        super().__init__(index, detail)
        self.path = path


def _hint(path: str) -> str:
    while path.endswith("[]"):
        path = path[:-2]
    return f"run discover again, or set the x-olake-type of field {path!r} to bson"


def misfit(index: int, path: str, value: Any, olake_type: str) -> FieldMisfit:
    """The misfit of ``value`` in the field at ``path``, its BSON type and value shown."""
    preview = repr(value)
    preview = preview if len(preview) <= 60 else preview[:57] + "..."
    return FieldMisfit(index, path, f"BSON {bson_type_name(value)} value {preview} does not fit "
                                    f"x-olake-type {olake_type}; {_hint(path)}")


def no_value(index: int, path: str) -> FieldMisfit:
    """The misfit of a null or missing value in a non-nullable field."""
    return FieldMisfit(index, path, f"no value (null or missing) in a non-nullable field; {_hint(path)}")


def unknown_field(index: int, path: str, document: Mapping, known: frozenset) -> FieldMisfit:
    """The misfit of the first field of ``document`` that the stream's json_schema lacks."""
    name = next(key for key in document if key not in known)
    field = f"{path}.{name}" if path else name
    return FieldMisfit(index, field, "field not in the stream's json_schema; run discover again, or "
                                     f"add field {field!r} with x-olake-type bson")


def source_error(stream_label: str, document: Mapping, bad: FieldMisfit) -> SourceError:
    """The SourceError of a misfit: the stream, the field and the document's ``_id``."""
    return value_error(SourceError, stream_label, bad.path, {"_id": document.get("_id")}, bad.index,
                       bad.detail)
