"""Chunk scans: inside a Spark task, read one chunk under the exported snapshot into Arrow batches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from olake_cli.core.errors import OlakeError, SourceError


@dataclass(frozen=True)
class PostgresChunkReader:
    """One chunk's query and the snapshot it reads under; small and picklable (one Spark partition)."""

    label: str
    chunk_index: int
    query: str
    uri: str = field(repr=False)
    snapshot_id: str | None
    batch_rows: int = 10_000

    def read_batches(self) -> Iterator[Any]:
        """Arrow record batches of the chunk, read through ADBC inside the exported snapshot."""
        try:
            yield from self._batches()
        except OlakeError:
            raise
        except Exception as exc:  # driver errors arrive as many types; report them as one SourceError
            message = f"chunk {self.chunk_index} of {self.label}: {type(exc).__name__}: {exc}"
            raise SourceError(_scrub(message, self.uri)) from None

    def _batches(self) -> Iterator[Any]:
        import adbc_driver_postgresql.dbapi as dbapi

        from olake_cli.sources.postgres.types import SCAN_SESSION_SETTINGS

        with dbapi.connect(self.uri) as conn:
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                if self.snapshot_id:
                    cur.execute(f"SET TRANSACTION SNAPSHOT '{self.snapshot_id}'")
                for name, value in SCAN_SESSION_SETTINGS.items():
                    cur.execute(f"SET {name} = '{value}'")
                cur.execute(self.query)
                for batch in cur.fetch_record_batch():
                    for start in range(0, batch.num_rows, self.batch_rows):
                        yield batch.slice(start, self.batch_rows)
            conn.rollback()


def _scrub(text: str, uri: str) -> str:
    """``text`` without the password that ``uri`` carries."""
    from urllib.parse import unquote, urlparse

    from olake_cli.sources.postgres.connection import scrub

    return scrub(text, unquote(urlparse(uri).password or ""))
