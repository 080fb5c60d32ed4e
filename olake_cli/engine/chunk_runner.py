"""Runs chunk tasks as Spark jobs (one task each), several at a time, yielding results as they finish."""

from __future__ import annotations

import glob
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from olake_cli.core.errors import TransientError
from olake_cli.engine.session import spark_log_path

TASK_RETRIES = int(os.environ.get("OLAKE_CHUNK_RETRIES", "3"))  # lost tasks run again per chunk
BACKOFF_S = 1.0


class SparkChunkRunner:
    """Submits one single-partition Spark job per chunk, keeping ``max_parallel`` in flight.

    Results come back in completion order; a new job starts only when a result has been handed to the
    consumer, so the driver never holds more than ``max_parallel + 1`` chunks in memory.
    """

    def __init__(self, spark_factory: Callable[[], Any], max_parallel: int | None = None,
                 local: bool = False, log: Callable[[str], None] | None = None) -> None:
        self._spark_factory = spark_factory
        self._log = log or (lambda text: print(f"olake: {text}", file=sys.stderr, flush=True))
        self._sc = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._max_parallel = max_parallel
        self._group = f"olake-{id(self)}"
        self._cancelled = threading.Event()
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
        """One chunk's Spark job. The task reports its own errors in its result, so a failed job
        means the task itself was lost (its Python worker crashed or was killed, an executor went
        away): the chunk is run again, up to ``OLAKE_CHUNK_RETRIES`` times, each attempt replacing
        what an earlier one staged."""
        from py4j.protocol import Py4JJavaError

        for attempt in range(1, TASK_RETRIES + 2):
            self.sc.setJobGroup(self._group, "olake chunk scan", interruptOnCancel=True)
            try:
                return self.sc.parallelize([task], 1).map(func).collect()[0]
            except Py4JJavaError as exc:
                reason = _java_reason(exc)
                if self._cancelled.is_set() or "cancelled" in reason.lower():
                    raise
                if attempt > TASK_RETRIES:
                    raise TransientError(f"a Spark task was lost {attempt} times ({reason}); check the "
                                         f"executors' memory and logs (the driver's: {spark_log_path()}), "
                                         f"then run again") from None
                self._log(f"a Spark task was lost ({reason}); running its chunk again (attempt {attempt + 1})")
                time.sleep(BACKOFF_S * attempt * (0.5 + random.random()))

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
                self._cancelled.set()
                self.sc.cancelJobGroup(self._group)
            pool.shutdown(wait=True, cancel_futures=True)

    def _top_up(self, pool, func, pending, in_flight: set[Future]) -> None:
        while len(in_flight) < self.max_parallel:
            task = next(pending, None)
            if task is None:
                return
            in_flight.add(pool.submit(self._run_one, func, task))


def _java_reason(exc: Exception) -> str:
    """The first line of a Spark job failure that says why (not the whole Java stack)."""
    text = str(getattr(exc, "java_exception", "") or exc)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Caused by: "):
            return line[len("Caused by: "):][:300]
    return (text.strip().splitlines() or [type(exc).__name__])[0][:300]


def _remove_orphan_spools() -> None:
    """Delete spool folders left by olake processes that were killed (their pid is gone)."""
    for folder in glob.glob(os.path.join(tempfile.gettempdir(), "olake-spool-*-*")):
        pid = os.path.basename(folder).split("-")[2]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(folder, ignore_errors=True)
