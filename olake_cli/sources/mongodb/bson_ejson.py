"""The ``bson`` type's values: any BSON value as canonical Extended JSON text (uuid.UUID written as
subtype 4), refused when the text would not read back as the same value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson
from bson import json_util
from bson.binary import UuidRepresentation
from bson.codec_options import DatetimeConversion
from bson.json_util import CANONICAL_JSON_OPTIONS, JSONOptions

from olake_cli.sources.mongodb.bson_misfits import FieldMisfit
from olake_cli.sources.mongodb.bson_schema import BSON_CODEC_OPTIONS

EJSON_OPTIONS: JSONOptions = CANONICAL_JSON_OPTIONS.with_options(
    uuid_representation=UuidRepresentation.STANDARD, datetime_conversion=DatetimeConversion.DATETIME_MS)


def ejson_text(value: Any, index: int, path: str) -> str:
    """``value`` as canonical Extended JSON; a FieldMisfit (document ``index``, field ``path``) when it
    is not BSON or would not read back as itself."""
    try:
        text = json_util.dumps(value, json_options=EJSON_OPTIONS)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FieldMisfit(index, path, f"value {type(value).__name__} is not BSON ({exc})") from None
    if _has_dollar_key(value) and not _reads_back(text, value):
        raise FieldMisfit(index, path, "a document whose field names Extended JSON reads as type "
                                       "markers ('$minKey', '$date', ...) cannot be carried exactly")
    return text


def _has_dollar_key(value: Any) -> bool:
    """Whether a document inside ``value`` has a field name starting with '$' (EJSON's markers)."""
    if isinstance(value, Mapping):
        return any(type(key) is str and key.startswith("$") or _has_dollar_key(item)
                   for key, item in value.items())
    if type(value) in (list, tuple):
        return any(_has_dollar_key(item) for item in value)
    return False


def _reads_back(text: str, value: Any) -> bool:
    """Whether Extended JSON ``text`` reads back as exactly the BSON of ``value``."""
    try:
        back = json_util.loads(text, json_options=EJSON_OPTIONS)
        return bson.encode({"v": back}, codec_options=BSON_CODEC_OPTIONS) == \
            bson.encode({"v": value}, codec_options=BSON_CODEC_OPTIONS)
    except Exception:  # noqa: BLE001 - any failure to read it back means it cannot be carried
        return False
