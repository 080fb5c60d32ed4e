"""Where a run's full-load chunks are scanned: on threads of this process when the loads are small, else
as Spark tasks.

Starting Spark costs seconds (a JVM, then a Python worker per core) whatever the load's size, more than
scanning a small table takes. On a local master (or the warm engine on this machine), a run whose full
loads the planners estimate at no more than ``in_process_rows`` rows in all (the source's setting) scans
their chunks here, on as many threads as Spark would run tasks, each a copy of the same picklable job a
task would get: the rows, files, states and errors are the same, and Spark never starts. Loads of unknown
size (a resumed load), larger ones, and every run on a cluster or a remote Connect server use Spark, which
starts in the background as soon as that is known, while the driver plans the other streams. The default
limit is where the threads and Spark's tasks meet on a 2-core machine (bench/bench_spark_path.py).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Generator, Iterable
from typing import Any

from olake_cli.core.contracts import ChunkRunner
from olake_cli.pipeline.chunk_job import in_threads

DEFAULT_IN_PROCESS_ROWS = 20_000_000


class LoadRunner:
    """A :class:`~olake_cli.core.contracts.ChunkRunner` that keeps small loads out of Spark."""

    def __init__(self, engine: ChunkRunner, local: bool, in_process_rows: int, max_parallel: int | None,
                 max_connections: int | None, log: Callable[[str], None]) -> None:
        self._engine = engine
        self._in_process = local and in_process_rows > 0  # until a load too large or of unknown size comes
        self._local = local
        self._limit = in_process_rows
        self._planned = 0
        self._unknown = False  # a load of unknown size was planned
        self._threads = max(1, min(max_parallel or os.cpu_count() or 1, max_connections or 1 << 16))
        self._log = log
        self._said: set[str] = set()  # which of the two ways the log has named

    @property
    def spool(self) -> Any:
        """Where chunks spool their lines (beside the driver on a local master: the same for both)."""
        return self._engine.spool

    def expect_load(self, rows: int | None) -> None:
        """A full load of about ``rows`` rows (None: unknown) is planned: Spark starts now if the run's
        loads no longer fit in this process."""
        self._planned += rows or 0
        self._unknown = self._unknown or rows is None
        if self._in_process:
            self._in_process = rows is not None and self._planned <= self._limit
        if not self._in_process:
            self._engine.expect_load(rows)

    def run(self, func: Callable[[Any], Any], tasks: Iterable[Any]) -> Generator[Any, None, None]:
        """``func(task)`` for every task, in completion order: here when the loads are small, else on Spark."""
        tasks = list(tasks)
        if not self._in_process:
            if tasks and self._local and "spark" not in self._said:
                self._said.add("spark")
                self._log(f"full loads of {self._size()}, more than in_process_rows ({self._limit:,}): "
                          f"they go to Spark")
            return self._engine.run(func, tasks)
        if tasks and "process" not in self._said:
            self._said.add("process")
            self._log(f"full loads of about {self._planned:,} row(s) in all: scanned in this process on "
                      f"{self._threads} thread(s), without Spark (in_process_rows {self._limit:,})")
        return in_threads(lambda task: func(pickle.loads(pickle.dumps(task))), tasks, self._threads)

    def _size(self) -> str:
        """The planned loads' size, for the log line."""
        if self._unknown:
            return f"at least {self._planned:,} row(s) in all (a resumed load's size is unknown)"
        return f"about {self._planned:,} row(s) in all"

    def close(self) -> None:
        """Stop the engine and remove what the run left."""
        self._engine.close()
