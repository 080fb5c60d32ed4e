"""What the Spark data source classes need from whoever plans and reads (pure Python, no pyspark).

Spark calls the data source in three kinds of Python process: ``schema`` in a planner worker,
``batch``/``stream`` and the planning calls in another (a stream's lives as long as the query), and
``read`` in the executors' workers; everything handed from one to the next is pickled, so scans and
partitions are small picklable values that connect to the source themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol
from collections.abc import Iterator

if TYPE_CHECKING:
    import pyarrow as pa

Options = dict[str, str]


class BatchScan(Protocol):
    """One batch read: planned when made, then pickled to the executors."""

    def partitions(self) -> list[Any]:
        """Picklable values, one per Spark input partition (one planned chunk each)."""
        ...

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """The partition's rows as Arrow batches or tables of the scan's schema (runs in an executor)."""
        ...


class StreamScan(Protocol):
    """One streaming query's reader; lives in the driver's streaming worker, ``read`` in executors.

    Offsets are JSON objects; ``partitions(start, end)`` must give the same rows every time it is
    asked for the same range (a restarted query asks again for the batch it had not committed).
    """

    def initial_offset(self) -> dict:
        """Where a query without a checkpoint starts."""
        ...

    def latest_offset(self, start: dict) -> dict:
        """The end of the micro-batch after ``start``: the source's position now (or less, to bound it)."""
        ...

    def prepare_available_now(self) -> None:
        """An availableNow run starts: ``latest_offset`` goes up to the source's position about now and
        then gives its ``start`` back (no more rows), so the run ends."""
        ...

    def partitions(self, start: dict, end: dict) -> list[Any]:
        """The rows after ``start`` up to ``end``, as picklable partitions."""
        ...

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        """One partition's rows (runs in an executor)."""
        ...

    def commit(self, end: dict) -> None:
        """Spark's checkpoint holds everything up to ``end``: the source may release its log up to it."""
        ...

    def stop(self) -> None:
        """The query stopped: close what the reader holds."""
        ...


class ScanProvider(Protocol):
    """Makes scans from the options of ``spark.read``/``spark.readStream`` (picklable itself)."""

    def schema(self, options: Options) -> pa.Schema:
        """The rows' Arrow schema (batch and stream reads alike)."""
        ...

    def batch(self, options: Options) -> BatchScan:
        """A planned batch read."""
        ...

    def stream(self, options: Options) -> StreamScan:
        """A streaming reader (it connects on its first call, not here: executors make one too)."""
        ...
