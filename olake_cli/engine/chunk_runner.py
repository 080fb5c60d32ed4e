"""Runs chunk tasks as Spark jobs (one task each), several at a time, yielding results as they finish.

Every job is a one-row DataFrame mapped through ``mapInArrow`` (engine/task_entry.py), so the same
code runs on classic Spark (local, standalone, YARN, Kubernetes) and over Spark Connect, where there
is no SparkContext and no RDD. Jobs carry a tag of this runner, which cancels them all at once.
"""

from __future__ import annotations

import glob
import os
import pickle
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from olake_cli.core.errors import ConfigError, OlakeError, TransientError
from olake_cli.engine import task_entry
from olake_cli.engine.session import cluster_cores, process_tag, spark_log_path
from olake_cli.shared.spool import Spool, process_alive

TASK_RETRIES = int(os.environ.get("OLAKE_CHUNK_RETRIES", "3"))  # lost tasks run again per chunk
BACKOFF_S = 1.0


class SparkChunkRunner:
    """Submits one single-partition Spark job per chunk, keeping ``max_parallel`` in flight.

    Results come back in completion order; a new job starts only when a result has been handed to the
    consumer. A task's output lines go to a spool file (shared/spool.py): on a local master one beside
    the driver (the task writes it there), on a cluster in the source's ``spark.spool`` (a mount or a
    bucket every node and the driver reach) when it names one, else on the executor's disk, sent back
    in pieces the driver appends to its own spool file (Spark's JVMs then hold the pieces of a chunk
    until the driver takes them).
    """

    def __init__(self, spark_factory: Callable[[], Any], max_parallel: int | None = None,
                 local: bool = False, log: Callable[[str], None] | None = None,
                 archive_name: str | None = None, max_connections: int | None = None,
                 spool: Spool | None = None, label: str = "local[*]", cores: int | None = None) -> None:
        self._spark_factory = spark_factory
        self._label = label  # where the jobs go, for the log line
        self._cores = cores  # the cluster's task slots when known without asking it (a job, over Connect)
        self._log = log or (lambda text: print(f"olake: {text}", file=sys.stderr, flush=True))
        self._spark = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._max_parallel = max_parallel
        self._max_connections = max_connections
        self._archive_name = archive_name  # the shipped environment (olake pack) the tasks put on sys.path
        self._tag = f"{process_tag()}-{id(self)}"
        self._cancelled = threading.Event()
        self._submitter = None
        self._said = False
        _remove_orphan_spools()
        # Driver-side spool folder: a local master's tasks write into it, other tasks' pieces land in it.
        self.driver_spool = tempfile.mkdtemp(prefix=f"olake-spool-{os.getpid()}-")
        # what the tasks are told: beside the driver, the run's shared spool, or (unshared) their own disk
        self.spool = Spool(self.driver_spool) if local else (spool.for_this_run() if spool else Spool())
        self._spool_to_log = not local  # where chunk lines come back from: said once, at the first chunk
        self._tidy_shared_spool = not local and self.spool.shared  # before the first chunks, and at close
        self._spool_tidied = False

    def close(self) -> None:
        """Remove the spool folder (and whatever a failed run left in it), and the files of this run and
        of killed ones in the shared spool."""
        shutil.rmtree(self.driver_spool, ignore_errors=True)
        if self._spool_tidied:
            self._remove_spool_orphans()

    def _remove_spool_orphans(self) -> None:
        """Delete the shared spool's files no chunk will hand out (shared/spool.py); a failure only logs."""
        if not self._tidy_shared_spool:
            return
        try:
            removed = self.spool.remove_orphans()
        except OlakeError as exc:
            self._log(f"could not tidy the spool: {exc}")
            return
        if removed:
            self._log(f"removed {removed} file(s) a killed or failed run left in the spool {self.spool.describe()}")

    def expect_load(self, rows: int | None) -> None:
        """A full load follows (of about ``rows`` rows): start the session in the background now, so its
        start-up overlaps the driver's planning."""
        if self._spark is not None or self._starting is not None:
            return

        def start() -> None:
            try:
                self._spark = self._spark_factory()
            except BaseException as exc:  # re-raised by the first use of ``spark``
                self._start_error = exc

        self._starting = threading.Thread(target=start, name="olake-spark-start", daemon=True)
        self._starting.start()

    @property
    def spark(self):
        """The SparkSession, started on first use (so bad input fails before the JVM starts)."""
        if self._starting is not None:
            self._starting.join()
            self._starting = None
            if self._start_error is not None:
                error, self._start_error = self._start_error, None
                raise error
        if self._spark is None:
            self._spark = self._spark_factory()
        return self._spark

    @property
    def max_parallel(self) -> int:
        """How many chunk jobs run at once: ``max_parallel``, else the cluster's cores; at most
        ``max_connections`` (each task holds one source connection)."""
        wanted = self._max_parallel or self._cores or cluster_cores(self.spark)
        if self._max_connections and wanted > self._max_connections:
            self._log(f"{wanted} chunk(s) could run at once; max_connections {self._max_connections} "
                      f"keeps the source's connections to that many")
            wanted = self._max_connections
        return max(1, wanted)

    def _run_one(self, func: Callable[[Any], Any], task: Any) -> Any:
        """One chunk's Spark job. The task reports its own errors in its result, so a failed job
        means the task itself was lost (its Python worker crashed or was killed, an executor went
        away): the chunk is run again, up to ``OLAKE_CHUNK_RETRIES`` times, each attempt replacing
        what an earlier one staged."""
        for attempt in range(1, TASK_RETRIES + 2):
            try:
                return self._job(func, task)
            except OlakeError:
                raise
            except Exception as exc:  # pyspark raises many types (py4j, captured, Connect gRPC)
                reason = _spark_reason(exc)
                if "No module named 'olake_cli'" in f"{exc} {getattr(exc, 'java_exception', '')}":
                    raise ConfigError("the executors' Python cannot import olake (No module named 'olake_cli'): "
                                      "build an archive with 'olake pack --output FILE.tar.gz' and name it in "
                                      "the source config as \"spark\": {\"archive\": FILE}, or install olake "
                                      "on the workers") from None
                if self._cancelled.is_set() or "cancel" in reason.lower() or "interrupt" in reason.lower():
                    raise
                if attempt > TASK_RETRIES:
                    raise TransientError(f"a Spark task was lost {attempt} times ({reason}); check the "
                                         f"executors' memory and logs (the driver's: {spark_log_path()}), "
                                         f"then run again") from None
                self._log(f"a Spark task was lost ({reason}); running its chunk again (attempt {attempt + 1})")
                time.sleep(BACKOFF_S * attempt * (0.5 + random.random()))

    def _job(self, func: Callable[[Any], Any], task: Any) -> Any:
        """Run one task and take its rows as they stream in: pieces into a driver spool file, then the result."""
        spool, result = None, None
        try:
            ship_back = not self.spool.shared
            for kind, data in self._jobs.rows(pickle.dumps((func, task)), ship_back, self._archive_name):
                if kind == task_entry.PIECE:
                    if spool is None:
                        spool = tempfile.NamedTemporaryFile(dir=self.driver_spool, prefix="chunk-",
                                                            suffix=".jsonl", delete=False)
                    spool.write(data)
                else:
                    result = pickle.loads(data)
        except BaseException:
            if spool is not None:
                spool.close()
                os.remove(spool.name)
            raise
        if spool is not None:
            spool.close()
            result.spool_path, result.spool = spool.name, None
        if self._spool_to_log and getattr(result, "spool_path", None):
            self._spool_to_log = False
            self._log(f"chunk lines come back through the spool {self.spool.describe()}" if self.spool.shared else
                      "chunk lines come back through Spark, whose JVMs hold a chunk's lines until they are "
                      "taken; name a shared folder or a bucket as the source's spark.spool to keep memory "
                      "bounded whatever the chunk size")
        return result

    @property
    def _jobs(self) -> _FrameJobs:
        """How jobs are submitted and cancelled on this session (made once)."""
        if self._submitter is None:
            self._submitter = _FrameJobs(self.spark, self._tag)
        return self._submitter

    def run(self, func: Callable[[Any], Any], tasks: Iterable[Any]) -> Generator[Any, None, None]:
        """Apply ``func`` to every task on the cluster; yield each result as soon as it is ready."""
        tasks = list(tasks)
        if not tasks:
            return  # no work: Spark is never started
        pending = iter(tasks)
        in_flight: set[Future] = set()
        limit = self.max_parallel
        if not self._said:
            self._said = True
            self._log(f"full-load chunks run as Spark tasks on {self._label}, {limit} at a time")
        if not self._spool_tidied:  # the run's first chunks
            self._spool_tidied = True
            self._remove_spool_orphans()
        pool = ThreadPoolExecutor(max_workers=limit + 1, thread_name_prefix="olake-chunk")
        try:
            self._top_up(pool, func, pending, in_flight, limit)
            while in_flight:
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    in_flight.discard(future)
                    yield future.result()
                    self._top_up(pool, func, pending, in_flight, limit)
        finally:
            if in_flight:
                self._cancelled.set()
                self._jobs.cancel()
            # cancelled jobs are not waited for (an interrupted run ends at once); their results are dropped
            pool.shutdown(wait=not in_flight, cancel_futures=True)

    def _top_up(self, pool, func, pending, in_flight: set[Future], limit: int) -> None:
        while len(in_flight) < limit:
            task = next(pending, None)
            if task is None:
                return
            in_flight.add(pool.submit(self._run_one, func, task))


class _FrameJobs:
    """Each job a one-row DataFrame carrying this runner's tag (classic Spark and Spark Connect alike).

    Measured on the project's machine (local[2], under load): a one-element RDD job, the way this
    runner worked before, took about 1 s each with its results streamed back, a DataFrame job about
    0.25 s; the DataFrame's first job costs a few seconds more (its Python worker imports pandas).
    """

    def __init__(self, spark, tag: str) -> None:
        self._spark, self._tag = spark, tag

    def rows(self, payload: bytes, ship_back: bool, archive_name: str | None) -> Iterator[tuple[int, bytes]]:
        """The task's ``(kind, data)`` rows as they arrive (one at a time in Python)."""
        self._spark.addTag(self._tag)  # this thread's operations: interruptTag cancels them
        self._spark.addTag(process_tag())
        try:
            for row in task_entry.chunk_frame(self._spark, payload, ship_back, archive_name).toLocalIterator():
                yield row[0], bytes(row[1])
        finally:
            self._spark.removeTag(self._tag)
            self._spark.removeTag(process_tag())

    def cancel(self) -> None:
        """Interrupt every operation carrying the tag."""
        self._spark.interruptTag(self._tag)


def _spark_reason(exc: Exception) -> str:
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
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
