"""``olake sync`` into several destinations: one reader, one writer per destination (``sync.run_lanes``).

Every destination keeps its own committed state in its own record, and they may stand at different
points (one committed a STATE the run was killed before another did). The run starts each stream from
the least advanced of them (:func:`least_advanced`), and a destination further on drops what it already
holds: full-load chunks it holds, as every run does, and changes at or below its own committed position
(:func:`replay_floors`). A stream some destination holds no copy of, or a copy of another load, is
loaded anew into every destination. What the destinations committed reaches the change capture as the
least advanced of them (:class:`LeastCommitted`), so a log is let go only up to what every one of them
committed; a STATE goes to stdout once every destination committed it (:class:`StateTally`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import ChangeCapture, Destination
from olake_cli.core.errors import ConfigError
from olake_cli.core.follow import CommittedStates
from olake_cli.core.locks import lock_identity
from olake_cli.core.messages import MessageWriter
from olake_cli.core.state import State, StreamState

Rank = Callable[[StreamState], tuple]


def check_distinct(paths: list[str], destinations: list[Destination]) -> None:
    """Refuse a destination named twice, or two configs whose records would collide (one place)."""
    seen: dict[str, str] = {}
    for path, destination in zip(paths, destinations):
        where = lock_identity(destination.lock_path())
        if where in seen:
            same = "is named twice" if seen[where] == path else f"and {seen[where]} write to the same place"
            raise ConfigError(f"--destination {path} {same}: each destination keeps its own record of what it "
                              f"committed, so every --destination must be a different place")
        seen[where] = path


def stream_rank(capture: ChangeCapture | None) -> Rank:
    """How far a stream state is: a load under way before a done one, fewer chunks done first, then the
    change position (``capture``'s operation id), then the incremental pass."""

    def rank(ss: StreamState) -> tuple:
        loading = ss.chunks is not None and not ss.all_chunks_succeeded
        done = sum(1 for c in ss.chunks or () if c.status == "succeed")
        position = capture.position_of(ss) if capture is not None else None
        op = tuple(capture.position_op(position)) if position is not None else (0, 0)
        return (0 if loading else 1, done, op, tuple(ss.pass_op_id or (0, 0)))

    return rank


def least_advanced(starts: list[State], names: list[str], catalog: Catalog, rank: Rank,
                   log: Callable[[str], None]) -> State:
    """The state the reader starts from: for each selected stream the least advanced of the destinations'
    states; none (a new load into every destination) when one holds none, or holds another load."""
    state = State()
    for stream in catalog.selected_streams():
        held = [s.find(stream.namespace, stream.name) for s in starts]
        if all(ss is None for ss in held):
            continue
        missing = [name for name, ss in zip(names, held) if ss is None]
        loads = {ss.load_id for ss in held if ss is not None}
        if missing or len(loads) > 1:
            why = f"{', '.join(missing)} hold(s) no copy of it" if missing else "the destinations hold different loads"
            log(f"{stream.label}: {why}; loading it anew into every destination")
            continue
        state.upsert(min(held, key=rank))
    return state


def replay_floors(start: State, capture: ChangeCapture | None) -> dict[tuple, str]:
    """Stream -> the operation id key a destination's committed change position covers (it holds every
    change at or below it)."""
    floors: dict[tuple, str] = {}
    for ss in start.streams:
        position = capture.position_of(ss) if capture is not None else None
        if position is not None and ss.sync_type == "cdc" and not ss.chunks:
            floors[ss.key] = capture.position_op(position).to_key()
    return floors


class LeastCommitted:
    """What every destination committed, for the change capture (``Follow.committed``): per stream the
    least advanced of the destinations' committed states; a stream not every one committed is left out."""

    def __init__(self, lanes: list[CommittedStates], start: State, rank: Rank) -> None:
        self.lanes, self.rank = lanes, rank
        self.current = [State.from_dict(start.to_dict()) for _ in lanes]

    def latest(self) -> State | None:
        """The combined state if a destination committed since the last call, else None."""
        changed = False
        for i, lane in enumerate(self.lanes):
            state = lane.latest()
            if state is not None:
                self.current[i], changed = state, True
        if not changed:
            return None
        combined = State()
        for ss in self.current[0].streams:
            held = [s.find(*ss.key) for s in self.current]
            if all(h is not None for h in held):
                combined.upsert(min(held, key=self.rank))
        return combined


class StateTally:
    """Puts each STATE on stdout once every destination's writer acknowledged it (the writers see the same
    STATEs in the same order); traces go on from the first writer only."""

    def __init__(self, out: MessageWriter, writers: int) -> None:
        self.out, self.writers = out, writers
        self.counts: dict[int, int] = {}  # STATE number -> writers that acknowledged it (until all did)
        self.lock = threading.Lock()

    def writer(self, index: int) -> _TallyWriter:
        """The MessageWriter of writer ``index``."""
        return _TallyWriter(self, index)

    def acknowledged(self, index: int, nth: int, msg: dict) -> None:
        """Writer ``index`` acknowledged its ``nth`` STATE ``msg``."""
        with self.lock:
            self.counts[nth] = self.counts.get(nth, 0) + 1
            if self.counts[nth] == self.writers:
                del self.counts[nth]  # a following run acknowledges STATEs for days: keep none once done
                self.out.write(msg)
                self.out.flush()


class _TallyWriter:
    """One writer's stdout in a fan-out: STATEs tallied, other messages passed on by the first writer."""

    def __init__(self, tally: StateTally, index: int) -> None:
        self.tally, self.index, self.states, self.passing = tally, index, 0, 0

    def pass_over(self, states: int) -> None:
        """The next ``states`` STATEs are ones this writer acknowledged before (a retry reads them again)."""
        self.passing = states

    def write(self, msg: dict) -> None:
        """Tally a STATE; pass a trace on (first writer only)."""
        if msg.get("type") == "STATE" and self.passing:
            self.passing -= 1
        elif msg.get("type") == "STATE":
            self.tally.acknowledged(self.index, self.states, msg)
            self.states += 1
        elif self.index == 0:
            self.tally.out.write(msg)

    def flush(self) -> None:
        """Flush stdout."""
        self.tally.out.flush()
