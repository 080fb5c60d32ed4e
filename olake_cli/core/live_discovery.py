"""Streams that appear or go while a run follows its change log (``--follow``).

The source is discovered again (at the start, then every ``--discovery-interval`` seconds); compared
with the run's catalog, a table or collection it did not name is *added* when the catalog's
``new_streams`` says so (``cdc`` or ``full_refresh``: selected, with that sync mode, if the stream
supports it; ``ignore``, the default, leaves it out), and a selected stream the source no longer has is
*gone*: its stream ends (deselected for the rest of the run, its destination data kept).

A new stream the run could not read (its sync mode unsupported, or what the source says of it: a source
with the capability :class:`NewStreamChecks`) is *left out*, with why and the fix, and every other stream goes on;
each discovery looks at it again, so it joins once fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from olake_cli.core.catalog import Catalog, CatalogStream, flat_entry

Unreadable = Callable[[list[CatalogStream]], dict[tuple, str]]  # a source's NewStreamChecks.unreadable


@runtime_checkable
class NewStreamChecks(Protocol):
    """A source that can say why a stream found while following cannot be read now (a capability, beside
    those of ``core.contracts``)."""

    def unreadable(self, streams: list[CatalogStream]) -> dict[tuple, str]:
        """Of ``streams`` (each with the sync mode it would join with): why each that the run could not read
        now cannot, with the fix (the text ``check`` gives); a readable stream is not named."""
        ...


@dataclass
class StreamChanges:
    """What a discovery found against the run's catalog."""

    added: list[CatalogStream] = field(default_factory=list)
    gone: list[CatalogStream] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)  # stream label -> why it is not read, with the fix
    notes: list[str] = field(default_factory=list)  # one line each, for the log

    def __bool__(self) -> bool:
        return bool(self.added or self.gone)


def stream_changes(discovered: dict[str, Any], catalog: Catalog, unreadable: Unreadable | None = None) -> StreamChanges:
    """The streams ``discovered`` (a discover result) adds to ``catalog`` under its ``new_streams`` rule, less
    those left out (``unreadable``: stream key -> why, with the fix, of the new streams it is given with the
    rule's sync mode; or a sync mode they do not support), and the selected streams it no longer holds."""
    found = {stream.key: stream for stream in (CatalogStream.from_dict(flat_entry(e)) for e in discovered["streams"])}
    known = {stream.key for stream in catalog.streams}
    rule = catalog.new_streams
    new = [replace(s, selected=True, sync_mode=rule) for key, s in found.items() if key not in known and rule != "ignore"]
    blocked = unreadable(new) if unreadable is not None and new else {}
    changes = StreamChanges()
    for stream in new:
        if stream.key in blocked:
            changes.left_out[stream.label] = blocked[stream.key]
        elif stream.supported_sync_modes and rule not in stream.supported_sync_modes:
            why = stream.x_olake.get("cdc_unsupported") if rule == "cdc" else None
            changes.left_out[stream.label] = (f"new_streams is '{rule}', which it does not support (supported: "
                                              f"{', '.join(stream.supported_sync_modes)})" + (f": {why}" if why else ""))
        else:
            changes.added.append(stream)
    changes.notes += [f"{stream.label}: new stream found; it is loaded and copied (sync_mode {rule}, the "
                      f"catalog's new_streams)" for stream in changes.added]
    changes.notes += [f"{label}: new stream left out until fixed (a later discovery adds it then): {why}"
                      for label, why in changes.left_out.items()]
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
