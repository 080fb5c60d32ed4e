"""A full load's chunk progress as destinations see it: which chunks a STATE newly marks done.

A destination stores the stream state it committed; a STATE arriving later may repeat chunks it already
holds (a replay after a kill between the destination's commit and the state file's write) or mark new
ones done. Chunk progress never goes back, and a load is identified by its ``load_id``.
"""

from __future__ import annotations

from olake_cli.core.state import State, StreamState, merge_state

UNKNOWN_LOAD = "0"  # the load of rows that arrive before any state names one


def load_id_of(state: dict | None) -> str | None:
    """The ``load_id`` a stream state dict belongs to (None: none recorded)."""
    return None if state is None else (state.get("stream_state") or {}).get("load_id")


def pending_chunks(state: dict | None, load_id: str) -> set[int] | None:
    """Indexes of the chunks of load ``load_id`` not yet done in a state dict (None: not that load)."""
    if state is None or load_id_of(state) != load_id:
        return None
    chunks = (state.get("stream_state") or {}).get("chunks")
    if state.get("sync_type") != "full-load" or not chunks:
        return set()
    return {i for i, chunk in enumerate(chunks) if chunk["status"] != "succeed"}


def newly_done_chunks(previous: dict | None, ss: StreamState, load_id: str) -> list[int]:
    """Chunks of ``load_id`` that ``ss`` marks done and the previously committed state did not."""
    now = pending_chunks(ss.to_dict(), load_id) or set()
    before = pending_chunks(previous, load_id)
    if before is None:  # first commit of this load seen here: every chunk it marks done is new
        before = set(range(len(ss.chunks or [])))
    return sorted(before - now)


def load_complete(ss: StreamState) -> bool:
    """Whether ``ss`` says its load has every chunk done."""
    return not (ss.sync_type == "full-load" and ss.chunks and any(c.status != "succeed" for c in ss.chunks))


def merged_stream_state(committed: dict | None, ss: StreamState) -> dict:
    """The stream state to commit: ``ss`` merged over the committed one (chunk progress never goes
    back; a replay of a load the destination already holds whole keeps the committed state)."""
    if committed is None:
        return ss.to_dict()
    load_id = ss.load_id
    if load_id and pending_chunks(committed, load_id) == set() and not load_complete(ss):
        return committed
    base = State(streams=[StreamState.from_dict(committed)])
    return merge_state(base, State(level="stream", streams=[ss])).find(*ss.key).to_dict()
