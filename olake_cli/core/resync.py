"""Loading a stream anew: the state that asks for it, and when a destination's contents call for it.

A stream whose source cannot be followed any more (a partition's TRUNCATE, a collection replaced or
dropped) gets a *re-sync marker*: a ``full-load`` state without a load id, chunks or position. It
names no load, so a destination that commits it keeps the stream's contents as they are (never an
empty table); the next run sees a full load that has not begun and starts a new one, which replaces
the old contents in one commit when it completes.

A destination that holds no data of the load a state has progressed in (no committed state at all,
or only a marker) has lost that data, for example a table dropped outside olake: continuing would
apply later changes to nothing, so the stream is loaded anew instead.
"""

from __future__ import annotations

import copy

from olake_cli.core.state import StreamState


def resync_marker(name: str, namespace: str | None, sync_mode: str | None, columns: list | None) -> StreamState:
    """The state of a stream to load anew on the next run (``sync_mode`` and ``columns`` of its catalog
    entry, so that the next run does not mistake the marker for a catalog change)."""
    return StreamState("full-load", name, namespace, None, [], sync_mode=sync_mode, columns=columns)


def marker_replacing(ss: StreamState) -> StreamState:
    """The re-sync marker for the stream of ``ss``, keeping the catalog keys ``ss`` was started with
    (sync mode, columns, recorded schema drift)."""
    marker = resync_marker(ss.stream_name, ss.stream_namespace, ss.sync_mode, copy.deepcopy(ss.columns))
    marker.schema_drift = copy.deepcopy(ss.schema_drift)
    return marker


def is_resync_marker(state: dict | None) -> bool:
    """Whether a stream entry (as a dict) is a re-sync marker: a full load with no load id and no chunk."""
    if state is None or state.get("sync_type") != "full-load":
        return False
    inner = state.get("stream_state") or {}
    return not inner.get("load_id") and not inner.get("chunks")


def lost_load(ss: StreamState, committed: dict | None) -> str | None:
    """Why the destination, whose committed stream entry is ``committed``, cannot continue ``ss``'s load
    (it holds none of the data ``ss`` says is there), or None when it can."""
    progressed = ss.sync_type in ("incremental", "cdc") or any(c.status == "succeed" for c in ss.chunks or [])
    if not ss.load_id or not progressed:
        return None
    if committed is None:
        return (f"the state says '{ss.sync_type}' but the destination holds no data of its load "
                f"(dropped or deleted outside olake?)")
    if is_resync_marker(committed):
        return f"the state says '{ss.sync_type}' but the destination has marked the stream to load anew"
    return None
