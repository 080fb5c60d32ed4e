"""One stream of the PostgreSQL destination during a run: its target table and what the target holds.

Rows wait in the pipeline's stream buffer until their commit, which writes them and the stream's state
in one transaction (commit.py); ``_olake.streams`` keeps, per table and origin, the state, the highest
applied operation id and when this destination last wrote rows into the table (bookkeeping.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from olake_cli.core.catalog import CatalogStream
from olake_cli.core.row_metadata import COMMIT_TS, SYNCED_AT
from olake_cli.destinations.postgres.tables import TargetTable


@dataclass
class PostgresStream:
    """One stream of the destination during a run."""

    stream: CatalogStream
    table: TargetTable
    committed: dict | None = None  # when opened: the stream state the target holds
    watermark: str | None = None  # when opened: the highest operation id applied to the target
    committed_at: datetime | None = None  # when this destination last wrote rows into the table
    resumed_load: str | None = None  # a load an earlier run began: its chunks may repeat keys
    holder: str = "the target"


def for_apply(changes: pa.Table) -> pa.Table:
    """Changes as the apply takes them: the stored ``_olake_*`` columns but the write time, the commit
    time as int64 µs."""
    changes = changes.drop_columns([SYNCED_AT])
    commit = changes.column(COMMIT_TS).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    return changes.set_column(changes.schema.get_field_index(COMMIT_TS), COMMIT_TS, commit)
