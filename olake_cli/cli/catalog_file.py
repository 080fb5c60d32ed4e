"""A catalog as a file people edit (``discover --output FILE``): indented JSON, each stream's choices first.

Containers short enough for one line stay on one line (a column's type, a key, a list of sync modes),
so a stream reads as ``name``, ``namespace``, then what the user may change (``selected``,
``sync_mode``, ``cursor_field``), then one line per column.
"""

from __future__ import annotations

import json
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.core.state import atomic_write_bytes

LINE_WIDTH = 120
EDITABLE_FIRST = ("name", "namespace", "selected", "sync_mode", "cursor_field")


def write_catalog_file(path: str, catalog: dict[str, Any]) -> None:
    """Write ``catalog`` to ``path`` atomically as :func:`editable_json` (a ConfigError if it cannot)."""
    streams = [_choices_first(entry) for entry in catalog.get("streams", [])]
    text = editable_json({**catalog, "streams": streams}) + "\n"
    try:
        atomic_write_bytes(path, text.encode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot write the catalog to '{path}': {exc.strerror or exc}") from None


def editable_json(value: Any, indent: int = 0, prefix: int = 0) -> str:
    """``value`` as JSON, two spaces an indent; a container fitting in :data:`LINE_WIDTH` columns
    (after ``prefix`` characters of its line) stays on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or indent + prefix + len(flat) <= LINE_WIDTH:
        return flat
    inner = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            label = json.dumps(key, ensure_ascii=False) + ": "
            items.append(inner + label + editable_json(item, indent + 2, len(label)))
    else:
        items = [inner + editable_json(item, indent + 2) for item in value]
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing


def _choices_first(entry: dict[str, Any]) -> dict[str, Any]:
    """A catalog entry with its name and the user's choices before the discovered details."""
    first = {key: entry[key] for key in EDITABLE_FIRST if key in entry}
    return {**first, **{key: value for key, value in entry.items() if key not in first}}
