"""Discovery while following (``--follow``): the catalog a following run starts with, and a thread that
looks at the source again every ``--discovery-interval`` seconds.

When streams appeared (under the catalog's ``new_streams`` rule) or went (``core.live_discovery``), the
thread asks the run to stop at its next checkpoint, as SIGTERM does, and the run is started again in the
same process (``follow_runtime``) with the changed catalog: a new stream is loaded, from a
snapshot stitched to the change log exactly as any first load is, while the other streams' changes wait
in the log, and then every stream is followed; a gone stream's capture ends. A new stream the run could not read is left out (``core.live_discovery``)
with a line and the ``olake_streams_left_out`` metric, and looked at again at each discovery.

What a discovery says is said once per process, also across the runs started again in it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from olake_cli.core.catalog import Catalog
from olake_cli.core.contracts import Source
from olake_cli.core.errors import OlakeError
from olake_cli.core.follow import Follow
from olake_cli.core.live_discovery import NewStreamChecks, StreamChanges, stream_changes, with_changes

DEFAULT_DISCOVERY_INTERVAL_S = 60.0
_SAID: set[str] = set()  # the discovery notes this process logged already


class StreamsChanged(Exception):
    """A following run ended because discovery found new or gone streams: start it again at once."""


def starting_catalog(source: Source, catalog: Catalog, log: Callable[[str], None]) -> Catalog:
    """``catalog`` with what a discovery finds now: new streams added under ``new_streams``, gone ones ended."""
    changes = discovered(source, catalog)
    say(changes, log)
    return with_changes(catalog, changes)


def discovered(source: Source, catalog: Catalog) -> StreamChanges:
    """What discovering ``source`` now finds against ``catalog``; the streams left out go to the metrics."""
    from olake_cli.pipeline.follow_status import metrics

    checks = source.unreadable if isinstance(source, NewStreamChecks) else None
    changes = stream_changes(source.discover(), catalog, checks)
    metrics().left_out(set(changes.left_out))
    return changes


def say(changes: StreamChanges, log: Callable[[str], None]) -> None:
    """Log the notes of ``changes`` this process has not logged yet."""
    for note in changes.notes:
        if note not in _SAID:
            _SAID.add(note)
            log(note)


class DiscoveryWatch:
    """A thread discovering the source every ``interval_s`` seconds (0: never) while a run follows; it
    sets ``follow.stop`` when the streams changed. Use as a context manager around the run, then call
    :meth:`raise_if_changed`."""

    def __init__(self, source: Source, catalog: Catalog, interval_s: float, follow: Follow,
                 log: Callable[[str], None]) -> None:
        self.source, self.catalog, self.interval_s, self.log = source, catalog, interval_s, log
        self.stop, self.requested = follow.stop, follow.requested
        self.changed = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="olake-discovery", daemon=True)

    def __enter__(self) -> DiscoveryWatch:
        if self.interval_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def raise_if_changed(self) -> None:
        """After the run ended: StreamsChanged if it ended for discovery (not for a stop request)."""
        if self.changed and not self.requested.is_set():
            raise StreamsChanged()

    def _run(self) -> None:
        while not self._done.wait(self.interval_s):
            try:
                changes = discovered(self.source, self.catalog)
            except OlakeError as exc:  # the run goes on; discovery tries again
                self.log(f"discovery failed: {exc}; looking again in {self.interval_s:g}s")
                continue
            except Exception as exc:  # a driver's own error type (its text may hold connection details)
                self.log(f"discovery failed ({type(exc).__name__}); looking again in {self.interval_s:g}s")
                continue
            if changes:  # the run started again says what changed (``starting_catalog``)
                self.log("discovery: the streams changed; the run commits what it read and starts again with them")
                self.changed = True
                self.stop.set()
                return
            say(changes, self.log)  # new streams left out
