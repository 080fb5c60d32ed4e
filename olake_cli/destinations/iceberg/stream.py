"""One stream of the Iceberg destination during a run: its table, what the table holds, and the data
files of full-load rows written ahead of their commit (the pipeline's stream buffer decides when).

Full-load rows handed over ahead of their commit (``put_load``, ``rows_per_file`` at a time) become
data files at once, invisible until the commit that references them; a commit whose rows turn out to
be dropped (a lost load, a source TRUNCATE before them, a replayed chunk) deletes them again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from olake_cli.core.catalog import CatalogStream
from olake_cli.destinations.iceberg.files import delete_quietly, write_rows
from olake_cli.destinations.iceberg.merge import TOAST


@dataclass
class IcebergStream:
    """One stream of the destination during a run."""

    stream: CatalogStream
    identifier: tuple[str, str]
    table: Table
    key_columns: list[str]
    spill_rows: int  # rows_per_file
    compression: str
    committed: dict | None = None  # when opened: the stream state the table holds
    watermark: str | None = None  # when opened: the highest operation id applied to the table
    staged: dict | None = None  # {"load_id", "files"}: a load waiting to replace the table
    written: list[DataFile] = field(default_factory=list)  # load rows already written, not committed
    replacement: Any = None  # TableMetadata whose schema the coming load's rows take (retype.py)
    rewrite: bool = False  # the replacement becomes current at the next commit, the rows converted (rewrite.py)
    holder: str = "the table"

    @property
    def write_metadata(self) -> Any:
        """The metadata full-load rows are written with: the replacement's while one is pending."""
        return self.table.metadata if self.replacement is None else self.replacement

    @property
    def keyed(self) -> bool:
        """Whether changes merge by key (keyless streams append every row)."""
        return bool(self.key_columns)

    def put_load(self, table: pa.Table, load_id: str) -> None:
        """Write full-load rows as data files (referenced at the next commit)."""
        self.written += write_rows(self.write_metadata, self.table.io, table.drop_columns([TOAST]), self.compression)

    def discard(self, load_id: str, truncated: bool) -> None:
        """Delete the data files written since the last commit."""
        delete_quietly(self.table.io, self.written)
        self.written = []
