"""What each stream's state says to do in this run: a new or resumed full load, an incremental pass, or
change capture, and why a load no longer matches the catalog; with the run's book-keeping per stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.resync import is_resync_marker
from olake_cli.core.schema_change import INCOMPATIBLE, olake_type_of, type_change
from olake_cli.core.state import StreamState
from olake_cli.pipeline.chunk_job import ChunkJob

NEXT_SYNC_TYPE = {"full_refresh": "full-load", "incremental": "incremental", "cdc": "cdc"}


@dataclass
class StreamRun:
    """Book-keeping for one stream during a run."""

    stream: CatalogStream
    state: StreamState
    kind: str = "full"  # full | incremental | cdc
    next_position: Any = None
    upto: Any = None  # incremental: the cursor value the pass reads up to (None: only NaN/infinite ones)
    op_id: list[int] | None = None  # incremental: the operation id of this pass's rows
    jobs: list[ChunkJob] = field(default_factory=list)
    row_estimate: int | None = None
    failed: bool = False
    drifted: bool = False  # its schema drifted in this run: its chunks go through the pipe, not a sink


def decide_work(stream: CatalogStream, previous: StreamState | None) -> str:
    """'resume', 'new' (full load) or 'continue' (incremental pass / change capture).

    A stream whose sync mode, columns or cursor column changed since its load began is loaded anew:
    its files and its position would not match the catalog any more.
    """
    if previous is None or reload_reason(stream, previous) is not None:
        return "new"
    if previous.sync_type == "full-load":
        if previous.chunks and any(c.status != "succeed" for c in previous.chunks):
            return "resume"
        return "new"
    if previous.sync_type == NEXT_SYNC_TYPE[stream.sync_mode]:
        return "continue"
    return "new"


def reload_note(stream: CatalogStream, previous: StreamState | None) -> str | None:
    """Why a stream that has a state is loaded anew, as said to the user (None for no state, or for a
    ``full_refresh`` stream's next copy)."""
    if previous is None:
        return None
    reason = reload_reason(stream, previous) or (
        "sync mode or columns changed" if previous.sync_type != "full-load" else None)
    if reason:
        return f"{reason} since the last load; loading it anew"
    if stream.sync_mode != "full_refresh" and is_resync_marker(previous.to_dict()):
        return "marked to load anew by an earlier run; loading it anew"
    return None


def reload_reason(stream: CatalogStream, previous: StreamState) -> str | None:
    """Why the catalog no longer matches the load ``previous`` belongs to (None: it still does)."""
    if previous.sync_mode not in (None, stream.sync_mode) or previous.columns not in (None, stream.columns):
        return "sync mode or columns changed"
    if stream.sync_mode == "incremental" and previous.cursor_column not in (None, stream.cursor_column):
        return f"cursor changed from '{previous.cursor_column}' to '{stream.cursor_column}'"
    current = column_types(stream)
    for name, old in (previous.column_types or {}).items():
        if current.get(name) is not None and type_change(old, current[name]) == INCOMPATIBLE:
            return f"column '{name}' changed type from {old} to {current[name]} in the catalog"
    return None


def pass_op_id(previous: StreamState | None, now_ms: int) -> list[int]:
    """The operation id of an incremental pass's rows: the clock in milliseconds, yet always above the
    stream's previous pass (``pass_op_id`` in its state), so a clock stepping back never ranks newer
    rows below older ones."""
    last = previous.pass_op_id if previous is not None else None
    return [max(now_ms, last[0] + 1 if last else 0), 0]


def column_types(stream: CatalogStream) -> dict[str, str | None]:
    """Column name -> x-olake-type, as recorded with a load (a later widening needs no reload)."""
    return {name: olake_type_of(prop) for name, prop in stream.json_schema.get("properties", {}).items()}
