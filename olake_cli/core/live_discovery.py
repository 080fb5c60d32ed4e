"""Streams that appear or go while a run follows its change log (``--follow``).

The source is discovered again (at the start, then every ``--discovery-interval`` seconds); compared
with the run's catalog, a table or collection it did not name is *added* when the catalog's
``new_streams`` says so (``cdc`` or ``full_refresh``: selected, with that sync mode, if the stream
supports it; ``ignore``, the default, leaves it out), and a selected stream the source no longer has is
*gone*: its stream ends (deselected for the rest of the run, its destination data kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from olake_cli.core.catalog import Catalog, CatalogStream, flat_entry


@dataclass
class StreamChanges:
    """What a discovery found against the run's catalog."""

    added: list[CatalogStream] = field(default_factory=list)
    gone: list[CatalogStream] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # one line each, for the log

    def __bool__(self) -> bool:
        return bool(self.added or self.gone)


def stream_changes(discovered: dict[str, Any], catalog: Catalog) -> StreamChanges:
    """The streams ``discovered`` (a discover result) adds to ``catalog`` under its ``new_streams`` rule,
    and the selected streams it no longer holds."""
    found = {stream.key: stream for stream in (CatalogStream.from_dict(flat_entry(e)) for e in discovered["streams"])}
    known = {stream.key for stream in catalog.streams}
    changes = StreamChanges()
    rule = catalog.new_streams
    for key, stream in found.items():
        if key in known or rule == "ignore":
            continue
        if stream.supported_sync_modes and rule not in stream.supported_sync_modes:
            changes.notes.append(f"{stream.label}: new stream left out: new_streams is '{rule}', which it does not "
                                 f"support (supported: {', '.join(stream.supported_sync_modes)})")
            continue
        changes.added.append(replace(stream, selected=True, sync_mode=rule))
        changes.notes.append(f"{stream.label}: new stream found; it is loaded and copied (sync_mode {rule}, "
                             f"the catalog's new_streams)")
    for stream in catalog.selected_streams():
        if stream.key not in found:
            changes.gone.append(stream)
            changes.notes.append(f"{stream.label}: no longer exists at the source; its stream ends (the "
                                 f"destination keeps what it holds)")
    return changes


def with_changes(catalog: Catalog, changes: StreamChanges) -> Catalog:
    """``catalog`` with the added streams selected and the gone ones deselected."""
    gone = {stream.key for stream in changes.gone}
    streams = [replace(s, selected=False) if s.key in gone else s for s in catalog.streams]
    return Catalog(streams + changes.added, catalog.new_streams)
