"""The destination's record is the truth (seeds/000): what a run resumes from, and ``olake state recover``.

Every destination commits each stream's state with the rows it makes live (the Parquet manifest, the
Iceberg table property ``olake.state``, PostgreSQL's ``_olake.streams``), so what it committed is the
last state that is certainly true. ``sync`` (and ``read --state-from``) start from it:

- without a state file, each selected stream resumes from the destination's record, said in one line;
  a stream the destination holds nothing of starts anew;
- with a state file, a stream whose entry differs from the destination's record (a copy that is behind,
  one of another pipeline, a lost file) takes the destination's, with a line saying from what to what;
  except a re-sync marker in the file that the destination has not committed: ``olake state reset``
  writes one to ask for a new load, and the run loads the stream anew;
- ``--full-refresh STREAM`` loads a stream anew: a new load, which the destination keeps beside the
  live contents and swaps in, whole, when its last chunk commits (as a re-sync does: ``core.resync``).

A stream the destination holds nothing of keeps the state file's entry; if that entry continues a load
(its table dropped outside olake), ``reload_lost_streams`` drops it once the destination is locked, so
the stream is loaded anew in that run.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable

from olake_cli.core.catalog import Catalog, CatalogStream
from olake_cli.core.errors import ConfigError
from olake_cli.core.resync import is_resync_marker, lost_load, marker_replacing, resync_marker
from olake_cli.core.state import State, StreamState, parse_state

CommittedState = Callable[[CatalogStream], "dict | None"]
_LISTED = 10  # streams a summary line names before "and N more"


def recover_state(committed_state: CommittedState, catalog: Catalog, log: Callable[[str], None]) -> State:
    """A global state for the selected streams from ``committed_state(stream)`` (a stream entry or None)."""
    state = State()
    for stream in catalog.selected_streams():
        ss = committed_entry(committed_state, stream)
        if ss is None:
            log(f"{stream.label}: nothing to resume from; the next run copies it in full")
            continue
        log(f"{stream.label}: {describe(ss)}")
        state.upsert(ss)
    return state


@dataclass
class StartingState:
    """What a run starts from: ``state`` (changed in place by the run), the lines to log once the run
    holds the destination, and the state file's content after the destination's record moved some of
    its streams (None: nothing moved)."""

    state: State
    notes: list[str]
    moved: State | None


def starting_state(state: State, committed_state: CommittedState | None, catalog: Catalog, state_file: str | None,
                   refresh: list[CatalogStream]) -> StartingState:
    """The state a run starts from: ``state`` (the file's, or empty) following the destination's record
    when the run can see the destination (``committed_state``), with the ``refresh`` streams marked."""
    in_file = state.to_dict()
    if committed_state is not None:
        notes = resume_from_destination(state, committed_state, catalog, state_file)
    elif state_file is None:
        notes = ["no --state or --state-from: every selected stream starts from the beginning "
                 "(--state-from DEST.json resumes from what the destination committed)"]
    else:
        notes = []
    moved = State.from_dict(state.to_dict()) if state_file is not None and state.to_dict() != in_file else None
    return StartingState(state, notes + mark_full_refresh(state, refresh), moved)


def resume_from_destination(state: State, committed_state: CommittedState, catalog: Catalog,
                            state_file: str | None) -> list[str]:
    """Make ``state`` follow what the destination committed for each selected stream; returns the lines
    to log once the run holds the destination. ``state_file`` names the file ``state`` was read from
    (None: there is none): with it, a line per stream that moved; without, one line saying what the
    run resumes from."""
    notes, resumed, fresh = [], [], []
    for stream in catalog.selected_streams():
        held, ss = state.find(stream.namespace, stream.name), committed_entry(committed_state, stream)
        if ss is None:
            if held is None:
                fresh.append(stream)
            continue
        if _reset_in_file(held, ss):
            notes.append(f"{stream.label}: the state file '{state_file}' marks it to load anew (olake state reset): "
                         f"a new load replaces what the destination committed ({describe(ss)}) when it completes")
            continue
        resumed.append((stream, ss))
        if held is not None and held.to_dict() == ss.to_dict():
            continue
        state.upsert(ss)
        if state_file is not None:
            notes.append(f"{stream.label}: the state file '{state_file}' holds {describe(held)}, the destination "
                         f"committed {describe(ss, held)}: resuming from the destination's record")
    if state_file is None:
        notes.append(_resume_line(resumed, fresh, len(catalog.selected_streams())))
    return notes


def _reset_in_file(held: StreamState | None, committed: StreamState) -> bool:
    """Whether the state file asks for a new load the destination has not begun: its entry is a re-sync
    marker (``olake state reset`` writes one) and the destination's is not."""
    return held is not None and is_resync_marker(held.to_dict()) and not is_resync_marker(committed.to_dict())


def committed_entry(committed_state: CommittedState, stream: CatalogStream) -> StreamState | None:
    """The destination's committed entry of ``stream``, checked against the state schema (or None)."""
    entry = committed_state(stream)
    if entry is None:
        return None
    what = f"the state the destination committed for '{stream.label}'"
    return parse_state({"level": "global", "streams": [entry]}, what=what).streams[0]


def _resume_line(resumed: list[tuple[CatalogStream, StreamState]], fresh: list[CatalogStream], total: int) -> str:
    """The one line of a run without a state file: the streams it resumes and those that start anew."""
    parts = []
    if resumed:
        listed = _names([f"{s.label}: {describe(ss)}" for s, ss in resumed], "; ")
        parts.append(f"resuming {len(resumed)} of {total} stream(s) from the state the destination committed "
                     f"({listed})")
    if fresh:
        skips = [s for s in fresh if s.sync_mode == "cdc" and s.skip_initial_load]
        loads = [s for s in fresh if s not in skips]
        held = "the destination holds nothing of"
        if loads:
            parts.append(f"{held} {len(loads)} stream(s), loaded in full: {_names([s.label for s in loads], ', ')}")
        if skips:
            parts.append(f"{held} {len(skips)} stream(s) with skip_initial_load, captured from the current "
                         f"position: {_names([s.label for s in skips], ', ')}")
    return "; ".join(parts) if parts else "no stream is selected"


def _names(items: list[str], sep: str) -> str:
    """``items`` joined by ``sep``, at most :data:`_LISTED` of them and how many more."""
    more = f"{sep}and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return sep.join(items[:_LISTED]) + more


def describe(ss: StreamState | None, other: StreamState | None = None) -> str:
    """A stream state as people read it: its sync type, position and chunk progress. With ``other``, the
    state keys the two differ in are named when their descriptions would read the same."""
    if ss is None:
        return "nothing"
    if is_resync_marker(ss.to_dict()):
        return "a mark to load it anew"
    text = ss.sync_type
    if ss.chunks:
        text += f", {sum(c.status == 'succeed' for c in ss.chunks)} of {len(ss.chunks)} chunk(s) done"
    elif ss.sync_type == "full-load":
        text += " (complete)"
    position = ss.position_text()
    text += f" at {position}" if position is not None else ""
    if other is not None and describe(other) == text:
        mine, theirs = ss.to_dict()["stream_state"], other.to_dict()["stream_state"]
        keys = sorted(k for k in {*mine, *theirs} if mine.get(k) != theirs.get(k))
        text += f" (differing in {', '.join(keys)})"
    return text


def reload_lost_streams(state: State, committed_state: CommittedState, catalog: Catalog,
                        log: Callable[[str], None]) -> None:
    """Drop from ``state`` the selected streams whose load the destination holds none of (a new load)."""
    for stream in catalog.selected_streams():
        ss = state.find(stream.namespace, stream.name)
        reason = None if ss is None else lost_load(ss, committed_state(stream))
        if reason is not None:
            log(f"{stream.label}: {reason}; loading it anew")
            state.streams.remove(ss)


def streams_named(catalog: Catalog, names: list[str], option: str) -> list[CatalogStream]:
    """The selected streams ``names`` name (``namespace.name``, or ``name`` when one stream has it); a
    ConfigError listing the selected streams for a name that fits none, or more than one."""
    selected, found = catalog.selected_streams(), []
    for name in names:
        matches = [s for s in selected if s.label == name] or [s for s in selected if s.name == name]
        if len(matches) != 1:
            what = "names no selected stream" if not matches else f"fits {len(matches)} streams"
            labels = ", ".join(s.label for s in (matches or selected)) or "none"
            raise ConfigError(f"{option} '{name}' {what} (selected: {labels}); give namespace.name")
        if matches[0] not in found:
            found.append(matches[0])
    return found


def mark_full_refresh(state: State, streams: list[CatalogStream]) -> list[str]:
    """Put a re-sync marker in place of each stream's state (a change capture's checks take it as a
    stream to load anew; :func:`forget_marked` removes them once the source is open); returns the lines
    to log then."""
    for stream in streams:
        held = state.find(stream.namespace, stream.name)
        state.upsert(resync_marker(stream.name, stream.namespace, None, None) if held is None
                     else marker_replacing(held))
    return [f"{stream.label}: full refresh asked: loaded anew; the new load replaces the destination's "
            f"contents when it completes" for stream in streams]


def forget_marked(state: State, streams: list[CatalogStream]) -> None:
    """Remove the streams :func:`mark_full_refresh` marked: the run plans a new load of each (never
    skipping it: a stream whose state the run dropped is loaded in full)."""
    keys = {s.key for s in streams}
    state.streams = [ss for ss in state.streams if ss.key not in keys]
