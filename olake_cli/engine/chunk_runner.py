"""Runs chunk tasks as Spark jobs (one task each), several at a time, yielding results as they finish."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any


class SparkChunkRunner:
    """Submits one single-partition Spark job per chunk, keeping ``max_parallel`` in flight.

    Results come back in completion order; a new job starts only when a result has been handed to the
    consumer, so the driver never holds more than ``max_parallel + 1`` chunks in memory.
    """

    def __init__(self, spark_factory: Callable[[], Any], max_parallel: int | None = None,
                 local: bool = False) -> None:
        self._spark_factory = spark_factory
        self._sc = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._max_parallel = max_parallel
        self._group = f"olake-{id(self)}"
        # With a local master, tasks share the driver's disk: they spool their output to files here
        # and return only the path, instead of sending every line through the JVM.
        self.spool_dir = None
        if local:
            _remove_orphan_spools()
            self.spool_dir = tempfile.mkdtemp(prefix=f"olake-spool-{os.getpid()}-")

    def close(self) -> None:
        """Remove the spool folder (and whatever a failed run left in it)."""
        if self.spool_dir:
            shutil.rmtree(self.spool_dir, ignore_errors=True)

    def prestart(self) -> None:
        """Start the JVM in the background now, so its start-up overlaps the driver's planning."""
        if self._sc is not None or self._starting is not None:
            return

        def start() -> None:
            try:
                self._sc = self._spark_factory().sparkContext
            except BaseException as exc:  # re-raised by the first use of ``sc``
                self._start_error = exc

        self._starting = threading.Thread(target=start, name="olake-spark-start", daemon=True)
        self._starting.start()

    @property
    def sc(self):
        """The SparkContext, started on first use (so bad input fails before the JVM starts)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            if self._start_error is not None:
                error, self._start_error = self._start_error, None
                raise error
        if self._sc is None:
            self._sc = self._spark_factory().sparkContext
        return self._sc

    @property
    def max_parallel(self) -> int:
        """How many chunk jobs run at once."""
        return max(1, self._max_parallel or self.sc.defaultParallelism)

    def _run_one(self, func: Callable[[Any], Any], task: Any) -> Any:
        self.sc.setJobGroup(self._group, "olake chunk scan", interruptOnCancel=True)
        return self.sc.parallelize([task], 1).map(func).collect()[0]

    def run(self, func: Callable[[Any], Any], tasks: Iterable[Any]) -> Iterator[Any]:
        """Apply ``func`` to every task on the cluster; yield each result as soon as it is ready."""
        tasks = list(tasks)
        if not tasks:
            return  # no work: Spark is never started
        pending = iter(tasks)
        in_flight: set[Future] = set()
        pool = ThreadPoolExecutor(max_workers=self.max_parallel + 1, thread_name_prefix="olake-chunk")
        try:
            self._top_up(pool, func, pending, in_flight)
            while in_flight:
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    in_flight.discard(future)
                    yield future.result()
                    self._top_up(pool, func, pending, in_flight)
        finally:
            if in_flight:
                self.sc.cancelJobGroup(self._group)
            pool.shutdown(wait=True, cancel_futures=True)

    def _top_up(self, pool, func, pending, in_flight: set[Future]) -> None:
        while len(in_flight) < self.max_parallel:
            task = next(pending, None)
            if task is None:
                return
            in_flight.add(pool.submit(self._run_one, func, task))


def _remove_orphan_spools() -> None:
    """Delete spool folders left by olake processes that were killed (their pid is gone)."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "olake-spool-*-*")):
        pid = os.path.basename(folder).split("-")[2]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(folder, ignore_errors=True)
