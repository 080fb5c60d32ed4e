"""olake-cli: copy PostgreSQL and MongoDB into Parquet, Iceberg and PostgreSQL."""

__version__ = "0.1.0"
