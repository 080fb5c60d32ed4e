"""What happens when a stream's change-log position is gone (seeds/003's safe zone): re-sync or fail."""

from __future__ import annotations

from collections.abc import Callable

from olake_cli.core.errors import PositionLostError
from olake_cli.core.state import State


def handle_lost_position(state: State, key: tuple, label: str, reason: str, on_position_lost: str,
                         log: Callable[[str], None]) -> None:
    """``fail``: raise PositionLostError; ``resync``: drop the stream from ``state`` (a fresh full load)."""
    if on_position_lost == "fail":
        raise PositionLostError(f"{label}: change position lost: {reason} "
                                f"(on_position_lost = fail; set it to resync to re-copy the stream)")
    log(f"{label}: change position lost: {reason}; re-syncing with a fresh full load (on_position_lost = resync)")
    state.streams = [s for s in state.streams if s.key != key]
