"""The ``read | write`` and ``sync`` use cases run in the test process on the session's Spark (the
``spark`` fixture), for end-to-end tests whose point is not the process boundary: no JVM per run."""

from __future__ import annotations

import io
from pathlib import Path

from olake_cli.core.messages import MessageWriter
from olake_cli.pipeline.connectors import run_read, run_sync, run_write
from olake_cli.pipeline.run_setup import RunOptions, SparkOptions


def read_write(src: str, catalog: Path, dst: str, state: Path) -> str:
    """``read | write`` with a shared state file (the writer saves it); returns both sides' log."""
    logs: list[str] = []
    lines = io.BytesIO()
    run_read(RunOptions(src, str(catalog), state=str(state), spark=SparkOptions("local[2]")), MessageWriter(lines),
             logs.append)
    run_write(dst, str(catalog), str(state), io.BytesIO(lines.getvalue()), MessageWriter(io.BytesIO()),
              logs.append)
    return "\n".join(logs)


def sync(src: str, catalog: Path, dst: str, state: Path) -> str:
    """``sync`` with a state file; returns its log."""
    logs: list[str] = []
    run_sync(RunOptions(src, str(catalog), destinations=(dst,), state=str(state), spark=SparkOptions("local[2]")),
             MessageWriter(io.BytesIO()), logs.append)
    return "\n".join(logs)
