"""When the input of ``write`` is complete: the rule every program feeding ``write`` follows.

The input is complete when it holds no TRACE ERROR, every stream announced in its CATALOG messages
(without any: every selected stream of ``write --catalog``) got a TRACE STREAM_STATUS ``COMPLETE``, and
no RECORD follows its last STATE. ``olake read`` ends each stream that way (after the stream's last STATE; a ``cdc`` stream
after change capture), so an input cut short (the reader killed, crashed or stopped) is told apart
from a finished one even when nothing checks the reader's exit status.
"""

from __future__ import annotations

from collections.abc import Iterable

COMPLETE = "COMPLETE"


class InputEnd:
    """Tracks the streams a reader announced and the last STREAM_STATUS of each."""

    def __init__(self) -> None:
        self.announced: dict[tuple, str] = {}  # (namespace, name) -> label, in announcement order
        self.statuses: dict[tuple, str] = {}
        self.catalogs = 0  # CATALOG messages seen

    def announce(self, streams: Iterable) -> None:
        """Streams of a CATALOG message (catalog streams: ``key`` and ``label``)."""
        self.catalogs += 1
        for stream in streams:
            self.announced.setdefault(stream.key, stream.label)

    def status(self, descriptor: dict, status: str) -> None:
        """A STREAM_STATUS trace's ``stream_descriptor`` and ``status``."""
        self.statuses[(descriptor.get("namespace"), descriptor["name"])] = status

    def stopped_early(self, expected: dict[tuple, str] | None, states: int, uncommitted: bool,
                      cut: bool = False) -> str | None:
        """None when every stream ended, else the one line saying the reading side stopped early.

        ``expected``: the selected streams of ``write --catalog`` (key -> label), or None without one;
        they count only when no CATALOG message came. ``states``, ``uncommitted``: see :func:`committed_text`.
        ``cut``: the input ended inside a line (left out), as when its writer was killed while writing.
        """
        rerun = ("its last line was cut; " if cut else "") + "run the same command again to resume"
        if not self.catalogs and expected is None:
            return f"the reading side stopped early: the input ended before its CATALOG message; {rerun}"
        streams = self.announced if self.catalogs else expected
        unfinished = [label for key, label in streams.items() if self.statuses.get(key) != COMPLETE]
        if not unfinished:
            return f"the reading side stopped early: {rerun}" if cut else None
        named = ", ".join(f"'{label}'" for label in unfinished[:3])
        more = f" and {len(unfinished) - 3} more" if len(unfinished) > 3 else ""
        return (f"the reading side stopped early: the input ended before {named}{more} reported "
                f"STREAM_STATUS COMPLETE; {committed_text(states, uncommitted)}; {rerun}")


def committed_text(states: int, uncommitted: bool) -> str:
    """What an input that ended badly left committed: ``states`` STATE messages were committed, and
    ``uncommitted`` says whether records followed the last one."""
    if not states:
        return "nothing was committed"
    lost = ", records after the last one are not" if uncommitted else ""
    return f"what its STATE messages covered is committed{lost}"
