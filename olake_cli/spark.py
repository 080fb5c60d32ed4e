"""olake as a Spark data source: ``register(spark)``, then ``spark.read.format("olake")`` and
``spark.readStream.format("olake")`` (see docs/spark.md)."""

from __future__ import annotations

from typing import Any

from olake_cli.engine.datasource.shipped import ship
from olake_cli.engine.datasource.source import datasource_class
from olake_cli.pipeline.spark_provider import OlakeScans


def register(spark: Any, archive: str | None = None) -> None:
    """Register the ``olake`` format with a SparkSession (classic or Spark Connect); with ``archive``
    (``olake pack``'s), add it to the session and have Spark's Python workers take olake from it (a
    Connect server's, or any without olake installed)."""
    source = datasource_class(OlakeScans())
    if archive is None:
        spark.dataSource.register(source)
        return
    spark.dataSource.register(ship(spark, source, archive))
