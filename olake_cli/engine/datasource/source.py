"""The pyspark classes of the ``olake`` data source, generic over a ``contracts.ScanProvider``.

Where each part runs (PySpark 4): ``schema`` in a planner worker on the driver; ``reader`` and its
``partitions`` in another planner worker (once per action: every action plans anew); a stream reader
lives in the driver's streaming worker for the query's lifetime (offsets, partitions, commit, stop);
``read`` runs in executors' Python workers on an unpickled copy of the reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from olake_cli.engine.datasource.arrow_spark import spark_batch, spark_schema
from olake_cli.engine.datasource.contracts import BatchScan, ScanProvider, StreamScan


def spark_arrow(schema: Any) -> pa.Schema:
    """The Arrow schema Spark takes a Python data source's batches in (timestamps in UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


class _Partition(InputPartition):
    """One planned partition (``value`` is the provider's picklable partition)."""


class OlakeReader(DataSourceReader):
    """A batch read: partitions planned by the provider's scan, read as Arrow batches."""

    def __init__(self, scan: BatchScan, schema: Any) -> None:
        self.scan, self.target = scan, spark_arrow(schema)

    def partitions(self) -> list[InputPartition]:
        """One input partition per planned chunk."""
        return [_Partition(p) for p in self.scan.partitions()]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows in Spark's Arrow types."""
        for batch in self.scan.read(partition.value):
            if batch.num_rows:
                yield spark_batch(batch, self.target)


class OlakeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read: offsets and partitions from the provider's stream scan."""

    def __init__(self, scan: StreamScan, schema: Any) -> None:
        self.scan, self.target = scan, spark_arrow(schema)

    def initialOffset(self) -> dict:  # noqa: N802 (pyspark's names)
        """Where a new query starts."""
        return self.scan.initial_offset()

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802
        """The end of the next micro-batch (its size is the provider's to bound: ``limit`` is Spark's
        default, all available)."""
        return self.scan.latest_offset(start)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """An availableNow run starts: read up to what the source holds now, then no further."""
        self.scan.prepare_available_now()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """The partitions of the rows between two offsets."""
        return [_Partition(p) for p in self.scan.partitions(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One partition's rows in Spark's Arrow types."""
        for batch in self.scan.read(partition.value):
            if batch.num_rows:
                yield spark_batch(batch, self.target)

    def commit(self, end: dict) -> None:
        """Spark committed everything up to ``end``."""
        self.scan.commit(end)

    def stop(self) -> None:
        """The query ended."""
        self.scan.stop()


class OlakeDataSource(DataSource):
    """``format("olake")``: the provider given to ``datasource_class`` plans and reads."""

    provider: ScanProvider  # set on the subclass ``datasource_class`` makes

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "olake"

    def schema(self) -> Any:
        """The stream's columns in Spark types (from discover's Arrow types) and the ``_olake_*`` columns."""
        return from_arrow_schema(spark_schema(self.provider.schema(dict(self.options))))

    def reader(self, schema: Any) -> DataSourceReader:
        """A batch reader, planned now."""
        return OlakeReader(self.provider.batch(dict(self.options)), schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:  # noqa: N802
        """A stream reader (connects on its first call)."""
        return OlakeStreamReader(self.provider.stream(dict(self.options)), schema)


def datasource_class(provider: ScanProvider) -> type[DataSource]:
    """The ``DataSource`` class to register, planning and reading through ``provider``."""
    return type("OlakeDataSource", (OlakeDataSource,), {"provider": provider})
