"""The connectors olake knows: one line each, naming the config schema and the class to load.

Adding a connector means one line here plus its package under ``sources/`` or ``destinations/``. A type
may name both a source and a destination (``postgres``): the role decides which entry applies.
Classes are imported only when a config names them, so an unused connector's drivers are never loaded.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from olake_cli.core.errors import ConfigError


@dataclass(frozen=True)
class ConnectorEntry:
    """A connector: its role, config schema name and ``module:Class`` path."""

    role: str  # 'source' or 'destination'
    schema: str
    target: str

    def load(self) -> Any:
        """The connector class."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


SOURCES: dict[str, ConnectorEntry] = {
    "postgres": ConnectorEntry("source", "source-postgres", "olake_cli.sources.postgres.source:PostgresSource"),
    "mongodb": ConnectorEntry("source", "source-mongodb", "olake_cli.sources.mongodb.source:MongoSource"),
    "dynamodb": ConnectorEntry("source", "source-dynamodb", "olake_cli.sources.dynamodb.source:DynamoSource"),
    "kafka": ConnectorEntry("source", "source-kafka", "olake_cli.sources.kafka.source:KafkaSource"),
}
DESTINATIONS: dict[str, ConnectorEntry] = {
    "parquet": ConnectorEntry("destination", "destination-parquet",
                              "olake_cli.destinations.parquet.writer:ParquetDestination"),
    "iceberg": ConnectorEntry("destination", "destination-iceberg",
                              "olake_cli.destinations.iceberg.destination:IcebergDestination"),
    "postgres": ConnectorEntry("destination", "destination-postgres",
                               "olake_cli.destinations.postgres.destination:PostgresDestination"),
    "kafka": ConnectorEntry("destination", "destination-kafka", "olake_cli.destinations.kafka.destination:KafkaDestination"),
}
PLANNED = {"dynamodb": "source"}  # types named in the design, not built yet


def entry(kind: str, role: str | None = None, where: str = "config") -> ConnectorEntry:
    """The registry entry of connector type ``kind`` (a ConfigError names the known ones)."""
    found = SOURCES.get(kind) if role != "destination" else None
    if found is None and role != "source":
        found = DESTINATIONS.get(kind)
    if found is not None:
        return found
    if kind in PLANNED:
        raise ConfigError(f"{where}: the {kind} {PLANNED[kind]} is not available in this version yet")
    table = SOURCES if role == "source" else DESTINATIONS if role == "destination" else {**SOURCES, **DESTINATIONS}
    label = f"{role} type" if role else "type"
    raise ConfigError(f"{where}: unknown {label} '{kind}' (sources: {', '.join(SOURCES)}; "
                      f"destinations: {', '.join(DESTINATIONS)})" if not role
                      else f"{where}: unknown {label} '{kind}' (known: {', '.join(table)})")


def make_source(kind: str, config: dict[str, Any]) -> Any:
    """The source connector for a validated config."""
    return entry(kind, "source").load()(config)


def make_destination(kind: str, config: dict[str, Any], log: Callable[[str], None]) -> Any:
    """The destination connector for a validated config."""
    return entry(kind, "destination").load()(config, log)
