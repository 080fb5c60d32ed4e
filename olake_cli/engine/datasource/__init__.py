"""olake as a PySpark Python data source (``spark.read.format("olake")``, ``spark.readStream.format("olake")``).

The pyspark classes here are generic: they plan and read through the small Protocols of
``contracts``, which ``pipeline/spark_*`` implements for olake's sources and ``olake_cli.spark`` wires in.
"""
