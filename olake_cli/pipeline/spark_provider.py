"""The ``ScanProvider`` that ``olake_cli.spark`` registers: olake's sources as the Spark data source."""

from __future__ import annotations

import pyarrow as pa

from olake_cli.pipeline.spark_scan import OlakeBatchScan, open_stream, read_options, start_keeper, stream_schema
from olake_cli.pipeline.spark_stream import OlakeStreamScan


class OlakeScans:
    """Makes batch and stream scans from the read's options (see ``spark_scan`` and ``spark_stream``)."""

    def schema(self, options: dict[str, str]) -> pa.Schema:
        """The stream's Arrow schema, from discover."""
        _, stream, _ = open_stream(read_options(options))
        return stream_schema(stream)

    def batch(self, options: dict[str, str]) -> OlakeBatchScan:
        """A batch read planned by a new keeper process."""
        return start_keeper(read_options(options))[0]

    def stream(self, options: dict[str, str]) -> OlakeStreamScan:
        """A streaming read (it connects on its first call)."""
        return OlakeStreamScan(read_options(options))
