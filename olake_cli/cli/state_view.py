"""A state file as a table a person reads: one line per stream."""

from __future__ import annotations

from olake_cli.core.state import State


def state_table(state: State) -> str:
    """Columns: stream, sync type, position (cursor value or change position), chunks done, load."""
    rows = [("stream", "sync type", "position", "chunks done", "load")]
    for ss in state.streams:
        chunks = ss.chunks or []
        done = f"{sum(c.status == 'succeed' for c in chunks)}/{len(chunks)}" if chunks else "-"
        position = ss.position_text() or "-"
        name = f"{ss.stream_namespace}.{ss.stream_name}" if ss.stream_namespace else ss.stream_name
        rows.append((name, ss.sync_type, position, done, str((ss.extra or {}).get("load_id", "-"))))
    if len(rows) == 1:
        return "(no streams)"
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
