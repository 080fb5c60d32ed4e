"""olake as a Spark data source: ``register(spark)``, then ``spark.read.format("olake")`` and
``spark.readStream.format("olake")`` (see docs/spark.md)."""

from __future__ import annotations

from typing import Any

from olake_cli.engine.datasource.source import datasource_class
from olake_cli.pipeline.spark_provider import OlakeScans


def register(spark: Any) -> None:
    """Register the ``olake`` format with a SparkSession."""
    spark.dataSource.register(datasource_class(OlakeScans()))
