"""A state file as a table a person reads: one line per stream, with its phase in the words of the
DynamoDB connector seed (seeds/003): DISCOVERY, INIT_SYNC, SYNC."""

from __future__ import annotations

from olake_cli.core.state import State, StreamState

DISCOVERY = "DISCOVERY"  # in the catalog, nothing copied yet


def phase_of(ss: StreamState) -> str:
    """INIT_SYNC (the full load of a cdc stream), SYNC (change capture), FULL_LOAD (any other load
    under way), RESYNC (loaded anew on the next run), LOADED (a finished full_refresh) or INCREMENTAL."""
    cdc = ss.sync_mode == "cdc"
    if ss.sync_type == "cdc":
        return "SYNC"
    if ss.sync_type == "incremental":
        return "INCREMENTAL"
    if ss.chunks:
        return "INIT_SYNC" if cdc else "FULL_LOAD"
    return "RESYNC" if ss.chunks is not None else "LOADED"


def state_table(state: State, discovered: list[tuple[str | None, str]] = ()) -> str:
    """Columns: stream, sync type, position (cursor value or change position), chunks done, load, phase;
    the ``discovered`` streams (namespace, name) the state does not hold yet are listed in DISCOVERY."""
    rows = [("stream", "sync type", "position", "chunks done", "load", "phase")]
    for ss in state.streams:
        chunks = ss.chunks or []
        done = f"{sum(c.status == 'succeed' for c in chunks)}/{len(chunks)}" if chunks else "-"
        rows.append((_name(ss.stream_namespace, ss.stream_name), ss.sync_type, ss.position_text() or "-", done,
                     "-" if ss.load_id is None else ss.load_id, phase_of(ss)))
    for namespace, name in discovered:
        if state.find(namespace, name) is None:
            rows.append((_name(namespace, name), "-", "-", "-", "-", DISCOVERY))
    if len(rows) == 1:
        return "(no streams)"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _name(namespace: str | None, name: str) -> str:
    return f"{namespace}.{name}" if namespace else name
