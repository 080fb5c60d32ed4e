"""The PostgreSQL destination's config: where to connect (shared with the source) and how tables are named.

``{"type": "postgres", "host", "port", "database", "username", "password", TLS fields...}`` plus
``schema`` (every table into this schema; default the stream's namespace), ``table_prefix``,
``origin`` (the replication origin write sessions run under; null for none), ``local_origin`` (the
name local changes count under when a conflict's commit times tie), ``tombstone_hours`` (how long
two-way applies remember each key's version and deleted keys), ``soft_delete`` and ``metadata_columns``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olake_cli.core.errors import ConfigError
from olake_cli.shared.postgres_connection import ConnectionSettings

DEFAULT_SCHEMA = "public"  # for streams without a namespace
MAX_IDENTIFIER_BYTES = 63  # PostgreSQL truncates longer names (NAMEDATALEN - 1)


@dataclass(frozen=True)
class TargetSettings(ConnectionSettings):
    """The validated ``postgres`` destination config, with defaults applied."""

    schema: str | None = None
    table_prefix: str = ""
    origin: str | None = "olake"
    local_origin: str = ""
    soft_delete: bool = False
    metadata_columns: bool = False
    tombstone_hours: float = 168.0

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> TargetSettings:
        """Settings from a config dict validated against ``destination-postgres``."""
        settings = super().from_config(cfg)
        if settings.soft_delete and not settings.metadata_columns:
            raise ConfigError("postgres destination: 'soft_delete' marks deleted rows in the column "
                              "_olake_op; set \"metadata_columns\": true as well")
        return settings

    def table_of(self, namespace: str | None, name: str) -> tuple[str, str]:
        """(schema, table) of a stream: the configured schema or the stream's, prefix + name."""
        schema, table = self.schema or namespace or DEFAULT_SCHEMA, f"{self.table_prefix}{name}"
        for what, value in (("schema", schema), ("table", table)):
            if len(value.encode()) > MAX_IDENTIFIER_BYTES:
                raise ConfigError(f"postgres destination: {what} name '{value}' of stream "
                                  f"'{namespace}.{name}' is longer than PostgreSQL's {MAX_IDENTIFIER_BYTES} bytes; "
                                  f"set 'schema' or a shorter 'table_prefix'")
        return schema, table
