"""The chunk runner on the shared local[2] session: how many chunks it keeps in flight."""

from __future__ import annotations

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
