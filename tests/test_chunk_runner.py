"""The chunk runner on the shared local[2] session: how many chunks it keeps in flight."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from olake_cli.engine.chunk_runner import SparkChunkRunner


def test_chunks_in_flight_follow_the_cores_capped_by_max_connections(spark):
    logs: list[str] = []
    runners = [SparkChunkRunner(lambda: spark, log=logs.append),
               SparkChunkRunner(lambda: spark, max_connections=1, log=logs.append),
               SparkChunkRunner(lambda: spark, max_parallel=5, max_connections=3, log=logs.append),
               SparkChunkRunner(lambda: spark, max_parallel=1, max_connections=3, log=logs.append)]
    try:
        assert [runner.max_parallel for runner in runners] == [2, 1, 3, 1]  # local[2] has 2 cores
        assert logs[0] == "2 chunk(s) could run at once; max_connections 1 keeps the source's connections to that many"
        assert "max_connections 3" in logs[-1] and len(logs) == 2
    finally:
        for runner in runners:
            runner.close()


def test_known_slots_are_not_asked_of_the_cluster():
    """A warm engine's slots come from its local master URL (local_cores): no job asks the server."""
    from olake_cli.engine.session import local_cores

    runner = SparkChunkRunner(lambda: pytest.fail("the cluster was asked"), cores=local_cores("local[3]"))
    try:
        assert runner.max_parallel == 3
    finally:
        runner.close()
    assert [local_cores(m) for m in ("local", "local[2,4]", "local[*]", "spark://h:7077")] == \
        [1, 2, os.cpu_count(), None]


def _stay(task: tuple[str, int]) -> int:
    """A chunk stand-in: notes when it ran (start and end times in a file named after it)."""
    folder, index = task
    started = time.time()
    time.sleep(0.4)
    Path(folder, str(index)).write_text(f"{started} {time.time()} {os.getpid()}")
    return index


def test_no_more_chunks_run_at_once_than_the_slots_and_the_log_says_where(spark, tmp_path):
    logs: list[str] = []
    runner = SparkChunkRunner(lambda: spark, log=logs.append, label="local[2]")
    try:
        results = sorted(runner.run(_stay, [(str(tmp_path), i) for i in range(7)]))
    finally:
        runner.close()
    assert results == list(range(7))
    spans = [tuple(map(float, (tmp_path / str(i)).read_text().split()[:2])) for i in range(7)]
    overlaps = [sum(1 for s, e in spans if s <= moment < e) for moment, _ in spans]
    assert max(overlaps) <= 2, spans
    assert logs == ["full-load chunks run as Spark tasks on local[2], 2 at a time"]
