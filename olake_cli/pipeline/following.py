"""Sets up each attempt of a run that follows its change log (``--follow``, ``pipeline.follow_runtime``):
its commit cadence, and where it learns what the destination committed (see ``core.follow``).

``sync`` hears of every commit from its own writer. ``read`` cannot see the writer on the other side of
the pipe: it re-reads the ``--state`` file that ``write --state`` keeps, or else asks the
``--state-from`` destination every DESTINATION_POLL_S seconds; with neither, the change log is let go
only when the next run starts.

A following run that fails transiently (the source or the destination unreachable, a connection lost)
is started again in the same process after a backoff (``follow_runtime``), from what the
destination committed, as a restart by a service manager would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import Destination, FollowCadence
from olake_cli.core.errors import ConfigError, OlakeError
from olake_cli.core.follow import CommittedStates, Follow, StateFileWatch
from olake_cli.core.state import State, load_state
from olake_cli.pipeline.recover import committed_entry
from olake_cli.pipeline.run_setup import FollowOptions

if TYPE_CHECKING:
    from olake_cli.pipeline.follow_runtime import FollowRuntime

READ_COMMIT_INTERVAL_S = 5.0  # read --follow's default: it does not know the destination
DESTINATION_POLL_S = 10.0


@dataclass
class Following:
    """A following ``sync``: the reader's :class:`Follow` and the writer's hook for each committed state."""

    follow: Follow
    committed: Callable[[State], None]


def commit_interval(given: float | None, destination: object | None) -> float:
    """``--commit-interval`` if given (checked), else the destination's default, else read's."""
    if given is not None:
        if not given > 0:
            raise ConfigError(f"--commit-interval {given:g}: give a number of seconds above 0")
        return given
    if isinstance(destination, FollowCadence):
        return destination.follow_commit_interval_s
    return READ_COMMIT_INTERVAL_S


def following_sync(destination: Destination, start: State, options: FollowOptions,
                   runtime: FollowRuntime) -> Following:
    """The set-up of ``sync --follow``: the writer reports each commit to the reader."""
    states = CommittedStates(start)
    return Following(runtime.follow(commit_interval(options.commit_interval_s, destination), states.latest),
                     states.add)


@dataclass
class FannedFollowing:
    """A following ``sync`` into several destinations: the reader's :class:`Follow`, and one hook per
    destination's writer for each state it committed."""

    follow: Follow
    lanes: list[Callable[[State], None]]


def following_fanned(destinations: list[Destination], start: State, options: FollowOptions, runtime: FollowRuntime,
                     least: Callable[[list[CommittedStates]], object]) -> FannedFollowing:
    """The set-up of ``sync --follow`` into several destinations: commits at the shortest of their
    intervals; the change capture hears what every one committed (``least``: ``fan_out.LeastCommitted``)."""
    states = [CommittedStates(start) for _ in destinations]
    interval = min(commit_interval(options.commit_interval_s, d) for d in destinations)
    return FannedFollowing(runtime.follow(interval, least(states).latest), [s.add for s in states])


def following_read(state_path: str | None, destination: Destination | None, catalog: Catalog,
                   options: FollowOptions, log: Callable[[str], None], runtime: FollowRuntime) -> Follow:
    """The set-up of ``read --follow``: the committed state comes from ``--state`` or ``--state-from``."""
    if state_path:
        committed = StateFileWatch(state_path, load_state).latest
    elif destination is not None:
        committed = _DestinationWatch(destination, catalog).latest
    else:
        committed = _nothing
        log("read --follow without --state or --state-from: the replication slot (or other change log) is let "
            "go only when the next run starts; give the --state file 'olake write --state' keeps")
    return runtime.follow(commit_interval(options.commit_interval_s, None), committed)


def _nothing() -> State | None:
    return None


class _DestinationWatch:
    """The committed state as the destination records it, asked at most every DESTINATION_POLL_S seconds."""

    def __init__(self, destination: Destination, catalog: Catalog) -> None:
        self.destination, self.streams = destination, catalog.selected_streams()
        self._asked = time.monotonic()

    def latest(self) -> State | None:
        """The destination's record if it is time to ask again, else None."""
        if time.monotonic() - self._asked < DESTINATION_POLL_S:
            return None
        self._asked = time.monotonic()
        state = State()
        for stream in self.streams:
            try:
                entry = committed_entry(self.destination.committed_state, stream)
            except OlakeError:  # the destination is away for now: ask again next time
                return None
            if entry is not None:
                state.upsert(entry)
        return state
