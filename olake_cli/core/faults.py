"""Deterministic fault injection for kill tests: SIGKILL this process at a named step.

With ``OLAKE_TEST_CRASH_AT=<step>`` the process kills itself (SIGKILL, no cleanup) when it reaches that
step; ``OLAKE_TEST_CRASH_AFTER=<n>`` lets the first n occurrences pass. Steps of a Parquet commit:
``staged`` (data files written under staged names), ``manifest-written`` (the commit point),
``renamed`` (staged files renamed to their final names), ``swapped`` (the stream's symlink replaced),
``state-saved`` (the --state file written, the STATE not yet echoed; shared by every destination);
of a merge of small Parquet files after a commit: ``merge-staged`` (the merged file written, the manifest
not yet) and ``merge-committed`` (the manifest written, not yet rolled forward).
Steps of an Iceberg commit (destinations/iceberg/commit.py): ``iceberg-files-written`` (the data and
delete files written, the catalog commit not yet made) and ``iceberg-committed`` (the catalog commit
made: table and its ``olake.state`` property updated, the --state file not yet written). Unset, it
does nothing. ``OLAKE_TEST_CRASH_SIGNAL=INT`` (or ``TERM``) sends that signal instead of SIGKILL: the
process handles it, as if Ctrl-C came at that step.
"""

from __future__ import annotations

import os
import signal

_seen: dict[str, int] = {}


def crash_point(step: str) -> None:
    """SIGKILL this process (or send it OLAKE_TEST_CRASH_SIGNAL) at ``step`` when OLAKE_TEST_CRASH_AT
    names it (tests only)."""
    if os.environ.get("OLAKE_TEST_CRASH_AT") != step:
        return
    _seen[step] = _seen.get(step, 0) + 1
    if _seen[step] > int(os.environ.get("OLAKE_TEST_CRASH_AFTER", "0")):
        os.kill(os.getpid(), signal.Signals["SIG" + os.environ.get("OLAKE_TEST_CRASH_SIGNAL", "KILL")])
