"""olake's catalog and state in the Airbyte protocol's form, for Airbyte clients (PyAirbyte, the platform),
and back.

With ``OLAKE_PROTOCOL=airbyte`` in the environment (``airbyte_output``), a CATALOG message olake prints is a
valid Airbyte catalog: ``supported_sync_modes`` holds only Airbyte's
``full_refresh`` and ``incremental``, and a stream whose changes olake can capture says so as Airbyte's
CDC sources do, ``"source_defined_cursor": true`` and ``"default_cursor_field": ["_ab_cdc_lsn"]`` (olake's
own default cursor kept in ``x-olake.cursor_default``); a stream chosen as ``cdc`` is ``incremental`` with
that cursor; each property gets Airbyte's type hints (``airbyte_type``, ``format``) from its
``x-olake-type``. ``olake_entry`` reads any of that back into olake's flat form.

With it, a STATE message olake prints carries its state twice over: olake's keys (``level``, ``version``,
``streams``) and Airbyte's (``type`` STREAM with ``stream``, or GLOBAL with ``global.stream_states``),
each stream's ``stream_state`` being olake's stream entry. ``olake_state_of`` rebuilds olake's state from
what an Airbyte client hands back (a list of such states, or one).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from olake_cli.core.errors import StateError

PROTOCOL_VARIABLE = "OLAKE_PROTOCOL"
CDC_CURSOR = "_ab_cdc_lsn"
_AIRBYTE_MODES = ("full_refresh", "incremental")
_HINTS = {"timestamp": {"format": "date-time", "airbyte_type": "timestamp_without_timezone"},
          "timestamptz": {"format": "date-time", "airbyte_type": "timestamp_with_timezone"},
          "time": {"format": "time", "airbyte_type": "time_without_timezone"},
          "date": {"format": "date"}}


def airbyte_output() -> bool:
    """Whether olake prints its CATALOG and STATE messages in Airbyte's form (``OLAKE_PROTOCOL=airbyte``)."""
    return os.environ.get(PROTOCOL_VARIABLE, "olake") == "airbyte"


def airbyte_stream(entry: dict) -> dict:
    """A catalog stream entry (olake's flat form) in Airbyte's form (see the module)."""
    out = copy.deepcopy(entry)
    modes = list(out.get("supported_sync_modes") or [])
    if "cdc" in modes:
        out["x-olake"] = {**out.get("x-olake", {}), "cursor_default": out.get("default_cursor_field") or []}
        out["source_defined_cursor"] = True
        out["default_cursor_field"] = [CDC_CURSOR]
        modes = [m for m in modes if m != "cdc"] + ([] if "incremental" in modes else ["incremental"])
    out["supported_sync_modes"] = [m for m in _AIRBYTE_MODES if m in modes]
    if out.get("sync_mode") == "cdc":
        out["sync_mode"], out["cursor_field"] = "incremental", [CDC_CURSOR]
    elif out.get("sync_mode") == "incremental" and not out.get("cursor_field") and "cdc" in entry.get(
            "supported_sync_modes", []):
        out["cursor_field"] = out["x-olake"]["cursor_default"]  # olake's default, named: not change capture
    properties = (out.get("json_schema") or {}).get("properties") or {}
    for prop in properties.values():
        if isinstance(prop, dict):
            prop.update({k: v for k, v in _HINTS.get(prop.get("x-olake-type"), {}).items() if k not in prop})
    return out


def olake_entry(entry: dict) -> dict:
    """A flat catalog entry in olake's form: a stream in Airbyte's CDC form offers ``cdc`` again (and its
    own default cursor), and ``incremental`` on the ``_ab_cdc_lsn`` cursor is ``cdc``."""
    if entry.get("default_cursor_field") != [CDC_CURSOR]:
        return entry
    out = dict(entry)
    olake = dict(out.get("x-olake") or {})
    out["default_cursor_field"] = olake.pop("cursor_default", [])
    if olake or "x-olake" in out:
        out["x-olake"] = olake
    modes = list(out.get("supported_sync_modes") or [])
    out["supported_sync_modes"] = modes + ([] if "cdc" in modes else ["cdc"])
    if out.get("cursor_field") in ([CDC_CURSOR], CDC_CURSOR):
        out.pop("cursor_field")
        if out.get("sync_mode") == "incremental":
            out["sync_mode"] = "cdc"
    elif out.get("sync_mode") == "incremental" and not out.get("cursor_field"):
        out["sync_mode"] = "cdc"  # the source-defined cursor: change capture
    return out


def with_airbyte_keys(state: dict) -> dict:
    """An olake state object with Airbyte's keys beside its own (see the module)."""
    parts = [{"stream_descriptor": {"name": s["stream_name"], "namespace": s.get("stream_namespace")},
              "stream_state": s} for s in state.get("streams", [])]
    if state.get("level") == "stream" and len(parts) == 1:
        return {**state, "type": "STREAM", "stream": parts[0]}
    return {**state, "type": "GLOBAL", "global": {"stream_states": parts}}


def olake_state_of(handed: Any) -> dict:
    """olake's global state from what an Airbyte client hands back: a list of Airbyte states (or one), each
    olake's own (with ``level``) or in Airbyte's form with olake's stream entries; later entries win."""
    streams: dict[tuple, dict] = {}
    for item in handed if isinstance(handed, list) else [handed]:
        if not isinstance(item, dict):
            continue
        if "level" in item:
            entries = item.get("streams") or []
        elif item.get("type") == "GLOBAL":
            entries = [part.get("stream_state") for part in (item.get("global") or {}).get("stream_states") or []]
        else:
            entries = [(item.get("stream") or {}).get("stream_state")]
        for entry in entries:
            if not (isinstance(entry, dict) and "stream_name" in entry):
                raise StateError(f"state: {str(item)[:80]!r} is not a state olake wrote (its stream_state is not "
                                 f"an olake stream entry)")
            streams[(entry.get("stream_namespace"), entry["stream_name"])] = entry
    return {"level": "global", "version": "v1", "streams": list(streams.values())}


def any_of_spec(schemas: list[dict]) -> dict:
    """One connection specification accepting a config of any of ``schemas`` (by its ``type``), what an
    Airbyte client asks a source for with ``spec``."""
    options = [{k: v for k, v in schema.items() if k not in ("$schema", "$id")} for schema in schemas]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "olake source",
            "description": "A config of any olake source, named by its \"type\" (olake spec --source TYPE prints one).",
            "type": "object", "required": ["type"], "oneOf": options}


def handed_by_client(state_path: str) -> bool:
    """Whether a state file holds what an Airbyte client hands a source (a JSON list of states, in a file it
    makes anew for each run): such a file names no pipeline (``core.pipeline_identity``)."""
    try:
        return Path(state_path).read_text(encoding="utf-8-sig").lstrip().startswith("[")
    except (OSError, UnicodeDecodeError):
        return False
