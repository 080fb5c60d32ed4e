"""``olake state recover``: rebuild the state from what the destination holds (seeds/000).

The Parquet destination commits each stream's state in the stream's manifest together with the files
it makes live, so the recovered state is exactly the last committed one: full-load chunk progress,
``cdc`` positions (also of streams that saw no change) and ``incremental`` cursors. A stream without
a manifest gets no state, so the next run copies it again, which is always safe.

Before ``sync`` reads, a stream whose state continues a load the destination holds none of (its
table dropped outside olake) is loaded anew in that run (``core.resync``).
"""

from __future__ import annotations

from typing import Callable

from olake_cli.core.catalog import Catalog
from olake_cli.core.resync import lost_load
from olake_cli.core.state import State, StreamState


def recover_state(committed_state: Callable[..., dict | None], catalog: Catalog,
                  log: Callable[[str], None]) -> State:
    """A global state for the selected streams from ``committed_state(stream)`` (a stream entry or None)."""
    state = State()
    for stream in catalog.selected_streams():
        entry = committed_state(stream)
        if entry is None:
            log(f"{stream.label}: nothing to resume from; the next run copies it in full")
            continue
        ss = StreamState.from_dict(entry)
        chunks = f", {sum(c.status == 'succeed' for c in ss.chunks)} of {len(ss.chunks)} chunk(s) done" \
            if ss.chunks else ""
        log(f"{stream.label}: {ss.sync_type} from {ss.cursor_field!r}{chunks}")
        state.upsert(ss)
    return state


def reload_lost_streams(state: State, committed_state: Callable[..., dict | None], catalog: Catalog,
                        log: Callable[[str], None]) -> None:
    """Drop from ``state`` the selected streams whose load the destination holds none of (a new load)."""
    for stream in catalog.selected_streams():
        ss = state.find(stream.namespace, stream.name)
        reason = None if ss is None else lost_load(ss, committed_state(stream))
        if reason is not None:
            log(f"{stream.label}: {reason}; loading it anew")
            state.streams.remove(ss)
