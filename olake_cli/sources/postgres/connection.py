"""PostgreSQL source settings; connecting itself is shared with the destination
(``olake_cli.shared.postgres_connection``: connection fields, TLS, one-line errors, secret removal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from olake_cli.shared.postgres_connection import ConnectionSettings, connect  # noqa: F401 (source modules import it here)
from olake_cli.sources.postgres.slot_wal import DEFAULT_WARN_BYTES

DEFAULT_CHUNK_ROWS = 250_000
DEFAULT_BATCH_ROWS = 10_000
DEFAULT_DECODING_WORK_MEM_MB = 256  # the change feed session's logical_decoding_work_mem (server default 64)


@dataclass(frozen=True)
class PostgresSettings(ConnectionSettings):
    """The validated ``postgres`` source config, with defaults applied."""

    schemas: tuple[str, ...] = ("public",)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    lock_timeout: int = 5  # seconds; see ExportedSnapshot.hold and LockWatch
    chunk_strategy: str = "ctid"
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    batch_rows: int = DEFAULT_BATCH_ROWS
    max_parallel: int | None = None
    replication_slot: str | None = None
    publication: str | None = None
    create_slot_and_publication: bool = False
    on_position_lost: str = "resync"
    slot_wal_warn_bytes: int = DEFAULT_WARN_BYTES
    logical_decoding_work_mem_mb: int = DEFAULT_DECODING_WORK_MEM_MB
    skip_origins: frozenset[str] | str = frozenset()  # "*": every origin

    @property
    def two_way(self) -> bool:
        """Whether this database also receives replicated changes (``skip_origins`` is set)."""
        return bool(self.skip_origins)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> PostgresSettings:
        """Build settings from a config dict already validated against the source schema."""
        values = dict(cfg)
        for name in ("schemas", "include", "exclude"):
            if name in values:
                values[name] = tuple(values[name])
        if isinstance(values.get("skip_origins"), list):
            values["skip_origins"] = frozenset(values["skip_origins"])
        return super().from_config(values)
